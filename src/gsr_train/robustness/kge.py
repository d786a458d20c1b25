"""Triple plausibility scorer for ATS and relation replacement: a PyG KG-embedding model.

OKGQA-P measures semantic drift with ATS (the mean plausibility of the perturbed KG's
triples under a link predictor trained on the original KG) and picks replacement relations
as the least plausible ones under the same scorer. We train a standard model from
``torch_geometric.nn.kge`` (DistMult by default; TransE / ComplEx / RotatE work too) on
the unique triples of the unperturbed split (global ids), with a binary cross-entropy loss
on each positive and one corrupted triple from the model's own ``random_sample``, so that
``sigmoid(score)`` is a probability in [0, 1]. Training is a fixed number of epochs (the
result does not depend on the machine's speed) and the model is cached under a key made
from the triples and the settings.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from gsr_train.io import atomic_dir, stable_hash, write_json
from gsr_train.kg.index import SplitGraphs
from gsr_train.robustness.options import KGEConfig

log = logging.getLogger(__name__)

KGE_FORMAT = 1


def _model_class(name: str):
    import torch_geometric.nn.kge as kge  # lazy: PyG takes a second to import; only the GNN path needs it

    cls = getattr(kge, name, None)
    if cls is None or not isinstance(cls, type) or not issubclass(cls, kge.KGEModel) or cls is kge.KGEModel:
        raise ValueError(
            f"kge.model {name!r} is not a model of torch_geometric.nn.kge (try DistMult, TransE, ComplEx, RotatE)"
        )
    return cls


class PlausibilityScorer:
    """``P(triple exists)`` for global-id triples, from a trained PyG KGE model."""

    def __init__(
        self,
        model,
        node_of_entity: torch.Tensor,
        known_relations: torch.Tensor,
        config: KGEConfig,
        meta: dict | None = None,
    ) -> None:
        self.model = model.eval()
        self.node_of_entity = node_of_entity  # [max entity id + 1] -> model node id (-1 unknown)
        self.known_relations = known_relations  # sorted global relation ids seen in training
        self.config = config
        self.meta = meta or {}

    def _nodes(self, ents: torch.Tensor) -> torch.Tensor:
        ents = ents.long()
        if ents.numel() and (
            int(ents.max()) >= self.node_of_entity.numel() or bool((self.node_of_entity[ents] < 0).any())
        ):
            raise ValueError("triple scorer: entity not in the graph it was trained on")
        return self.node_of_entity[ents]

    @torch.no_grad()
    def logits(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor, chunk: int = 1 << 16) -> torch.Tensor:
        hn, tn = self._nodes(h), self._nodes(t)
        out = torch.empty(hn.numel())
        for s in range(0, hn.numel(), chunk):
            out[s : s + chunk] = self.model(hn[s : s + chunk], r[s : s + chunk].long(), tn[s : s + chunk]).float()
        return out

    def probability(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(h, r, t))

    @torch.no_grad()
    def least_plausible_relation(
        self, h: torch.Tensor, t: torch.Tensor, exclude: torch.Tensor | None = None, chunk: int = 4096
    ) -> torch.Tensor:
        """``argmin_{r' != exclude} score(h, r', t)`` over the relations seen in training."""
        hn, tn = self._nodes(h), self._nodes(t)
        rels = self.known_relations
        if rels.numel() < 2:
            raise ValueError("relation replacement needs at least two relations in the graph")
        out = torch.empty(hn.numel(), dtype=torch.long)
        fast = type(self.model).__name__ == "DistMult"
        for s in range(0, hn.numel(), chunk):
            hh, tt = hn[s : s + chunk], tn[s : s + chunk]
            if fast:  # bilinear: one matmul over all relations
                ht = self.model.node_emb(hh) * self.model.node_emb(tt)
                scores = ht @ self.model.rel_emb(rels).T
            else:
                n = hh.numel()
                scores = self.model(
                    hh.repeat_interleave(rels.numel()), rels.repeat(n), tt.repeat_interleave(rels.numel())
                ).view(n, rels.numel())
            if exclude is not None:
                scores = scores.masked_fill(rels.unsqueeze(0) == exclude[s : s + chunk].unsqueeze(1), float("inf"))
            out[s : s + chunk] = rels[scores.argmin(1)]
        return out


def _triples(split: SplitGraphs) -> torch.Tensor:
    return torch.unique(split.global_edges(), dim=0)


def train_scorer(
    split: SplitGraphs, num_relations: int, config: KGEConfig | Mapping | None = None
) -> PlausibilityScorer:
    """Fit the KGE model on the split's unique triples (CPU, fixed epochs)."""
    cfg = KGEConfig.from_any(config)
    triples = _triples(split)
    if triples.numel() == 0:
        raise ValueError("cannot train a triple scorer on a split without edges")
    ents, inv = torch.unique(triples[:, [0, 2]].reshape(-1), return_inverse=True)
    inv = inv.view(-1, 2)
    h, r, t = inv[:, 0], triples[:, 1], inv[:, 1]
    torch.manual_seed(cfg.seed)
    model = _model_class(cfg.model)(ents.numel(), num_relations, cfg.dim)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    model.train()
    last = float("nan")
    for _ in range(cfg.epochs):
        perm = torch.randperm(h.numel(), generator=gen)
        total, batches = 0.0, 0
        for s in range(0, perm.numel(), cfg.batch_size):
            b = perm[s : s + cfg.batch_size]
            pos = model(h[b], r[b], t[b])
            neg = model(*model.random_sample(h[b], r[b], t[b]))
            loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos)) + F.binary_cross_entropy_with_logits(
                neg, torch.zeros_like(neg)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach())
            batches += 1
        last = total / max(batches, 1)
    seconds = time.perf_counter() - t0
    node_of = torch.full((int(ents.max()) + 1,), -1, dtype=torch.long)
    node_of[ents] = torch.arange(ents.numel())
    meta = {
        "triples": int(h.numel()),
        "entities": int(ents.numel()),
        "final_loss": last,
        "train_seconds": round(seconds, 2),
        "config": asdict(cfg),
    }
    log.info("triple scorer %s trained on %d triples in %.1fs (loss %.4f)", cfg.model, h.numel(), seconds, last)
    return PlausibilityScorer(model, node_of, torch.unique(r), cfg, meta)


def scorer_key(split: SplitGraphs, num_relations: int, config: KGEConfig) -> str:
    digest = hashlib.sha256(_triples(split).numpy().tobytes()).hexdigest()
    return stable_hash("kge", KGE_FORMAT, digest, num_relations, asdict(config))


def get_scorer(
    split: SplitGraphs,
    num_relations: int,
    config: KGEConfig | Mapping | None = None,
    cache_dir: str | Path | None = None,
) -> PlausibilityScorer:
    """The cached scorer of ``split`` (trained and saved on first use)."""
    cfg = KGEConfig.from_any(config)
    if cache_dir is None:
        return train_scorer(split, num_relations, cfg)
    folder = Path(cache_dir) / "kge" / scorer_key(split, num_relations, cfg)
    path = folder / "scorer.pt"
    if path.is_file():
        try:
            state = torch.load(path, weights_only=False)
            model = _model_class(cfg.model)(state["num_nodes"], num_relations, cfg.dim)
            model.load_state_dict(state["model"])
            log.info("triple scorer loaded from %s", folder)
            return PlausibilityScorer(model, state["node_of_entity"], state["known_relations"], cfg, state["meta"])
        except Exception as e:  # damaged cache: retrain
            log.warning("retraining triple scorer (%s: %s)", path, e)
    scorer = train_scorer(split, num_relations, cfg)
    with atomic_dir(folder) as tmp:
        torch.save(
            {
                "model": scorer.model.state_dict(),
                "num_nodes": int(scorer.model.num_nodes),
                "node_of_entity": scorer.node_of_entity,
                "known_relations": scorer.known_relations,
                "meta": scorer.meta,
            },
            tmp / "scorer.pt",
        )
        write_json(tmp / "meta.json", scorer.meta)
    return scorer
