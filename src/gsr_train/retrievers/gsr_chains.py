"""GSR as a retriever of the `gsr_train.retrievers.interface` shape: beam search does not look
at the graph (unconstrained decoding), so the chains are decoded once per question (or read from
a results file's ``beams``) and only *executed* on the graphs they are scored against (e.g. every
perturbed version of a split): the first ``top_n`` executable chains give the triples (scored by
their chain score), and the share of executable chains is reported as chain validity.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from gsr_train.io import iter_jsonl
from gsr_train.kg.execution import ChainExecutor, verbalize_path
from gsr_train.kg.index import SplitGraphs
from gsr_train.models.gsr.decoding import KGConstraint, beam_chains
from gsr_train.models.gsr.modeling import load_gsr
from gsr_train.models.gsr.options import DecodeConfig
from gsr_train.retrievers.interface import ROW_FIELDS, Scores

log = logging.getLogger(__name__)


class GSRChains:
    """Decoded GSR beams of every question, executed on any version of the split's graphs."""

    name = "gsr"

    def __init__(
        self,
        beams: Sequence[Sequence[tuple[tuple[int, ...] | None, float]]],
        top_n: int = 3,
        names: tuple[Sequence[str], Sequence[str]] | None = None,
        max_paths: int = 8,
    ) -> None:
        self.beams = [list(b) for b in beams]
        self.top_n = int(top_n)
        self.names, self.max_paths = names, int(max_paths)  # (entities, relations): write each row's paths

    def with_paths(self, entities: Sequence[str], relations: Sequence[str], max_paths: int = 8) -> GSRChains:
        """The same chains, whose rows also carry their reasoning paths (``e0 -> r1 -> e1 <- r2 <- e2``,
        up to ``max_paths`` per executed chain) for the readers' ``paths`` format."""
        self.names, self.max_paths = (entities, relations), int(max_paths)
        return self

    @classmethod
    def decode(
        cls,
        model_path: str | Path,
        questions: Sequence[str],
        relations: Sequence[str],
        decode: Mapping[str, Any] | None = None,
        device: Any = None,
    ) -> GSRChains:
        """Unconstrained beam search with a saved GSR model (``save_pretrained`` folder or .ckpt) on
        ``device`` (the run's; None: the CPU)."""
        cfg = DecodeConfig.from_any({**dict(decode or {}), "constrained": False})
        gsr = load_gsr(model_path).to(device or "cpu")
        mapping = KGConstraint(gsr, None, relations, [])
        t0 = time.perf_counter()
        decoded = beam_chains(gsr, list(questions), cfg)
        log.info("GSR: decoded %d questions in %.1fs", len(questions), time.perf_counter() - t0)
        return cls([[(mapping.to_kg(b.chain), b.score) for b in per_q] for per_q in decoded], cfg.top_n)

    @classmethod
    def from_results(cls, path: str | Path, split: SplitGraphs, relations: Sequence[str], top_n: int = 3) -> GSRChains:
        """Beams from a GSR results file (``beams`` field: ``{"chain": [names], "score"}``), matched by id."""
        lookup = {r: i for i, r in enumerate(relations)}
        pos = split.position()
        beams: list[list] = [[] for _ in range(len(split))]
        for line, row in iter_jsonl(path):
            if not isinstance(row, dict) or "id" not in row:
                raise ValueError(f"{path}: line {line}: not a results row with an 'id'")
            if row["id"] not in pos:
                continue
            if "beams" not in row:
                raise ValueError(
                    f"{path}: line {line}: id {row['id']!r} has no 'beams' field (not a GSR results file?)"
                )
            out = []
            for b in row["beams"]:
                chain = b.get("chain")
                ids = None if chain is None else [lookup.get(r, -1) for r in chain]
                out.append((None if ids is None or min(ids, default=0) < 0 else tuple(ids), float(b["score"])))
            beams[pos[row["id"]]] = out
        return cls(beams, top_n)

    def score(self, split: SplitGraphs) -> Scores:

        if len(split) != len(self.beams):
            raise ValueError(f"{len(self.beams)} decoded questions for a split of {len(split)}")

        ex = ChainExecutor(split, direction="both")
        num_e = int(split.edge_ptr[-1]) if len(split) else 0
        scores = torch.full((num_e,), -math.inf)
        valid_top, total_top, any_valid = 0, 0, 0
        paths: list[list[str]] = [[] for _ in self.beams]
        for q, per_q in enumerate(self.beams):
            kept = 0
            flags = []
            for chain, score in per_q:
                ok = chain is not None and ex.is_valid(q, chain)
                flags.append(ok)
                if chain is not None and ok and kept < self.top_n:
                    kept += 1
                    walk = ex.execute(q, chain)
                    edges = ex.global_edges(walk)
                    if edges.numel():
                        cur = scores[edges]
                        scores[edges] = torch.maximum(cur, torch.full_like(cur, score))
                    if self.names is not None:  # best chain first, its paths in enumeration order
                        entities, relations = self.names
                        found = ex.paths(walk, self.max_paths)
                        paths[q] += [verbalize_path(p, walk, split, entities, relations) for p in found]
            top = flags[: self.top_n]
            valid_top += sum(top)
            total_top += len(top)
            any_valid += any(flags)
            ex.clear_cache()
        extra: dict[str, Any] = {
            f"valid@{self.top_n}": valid_top / total_top if total_top else 0.0,
            "questions_with_valid_chain": any_valid / len(self.beams) if self.beams else 0.0,
        }
        if self.names is not None:
            extra[ROW_FIELDS] = {"paths": paths}
        return scores, extra
