"""Beam search over relation chains, optionally constrained by the KG.

``beam_chains`` runs Hugging Face beam search and returns, per question, the top-B chains
with their scores (length-normalised log-probabilities, ``length_penalty`` as in HF).

One `ChainLogitsProcessor` shapes every step:

* vocabulary restriction (``restrict_vocab``, default on): only relation tokens and EOS
  can be emitted, EOS not as the first token (an empty chain retrieves nothing) and
  forced after ``max_hops`` relations. Scores are masked *after* the log-softmax, so a
  chain's score stays its log-probability under the model.
* KG constraint (``constrained``): a beam may continue only with relations that have at
  least one edge (either direction) at the entities its prefix has reached from the topic
  entities, so every finished chain is executable. The "allowed next relations" of a
  prefix come from `gsr_train.kg.execution.ChainExecutor` (memoised per prefix).
  With ``shortest`` (default on) each hop must also move one hop farther from the topic
  entities, so the finished chains are shortest-path chains, as ground chains are: beams are
  not spent on chains that walk back to where they started.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor

from gsr_train.features.relation_tokens import RETRIEVAL_PREFIX
from gsr_train.memory import keep_freed_memory
from gsr_train.models.gsr.options import DecodeConfig
from gsr_train.progress import progress

DECODE_PROGRESS_THRESHOLD = 500  # questions

Constraint = Callable[[int, tuple[int, ...]], torch.Tensor]


@dataclass
class BeamChain:
    """A generated chain (model relation indices; ``None`` if the output was not a chain) and its score."""

    chain: tuple[int, ...] | None
    score: float


class ChainLogitsProcessor(LogitsProcessor):
    """Masks next-token scores to the chain vocabulary and (optionally) to KG-executable relations."""

    def __init__(
        self,
        gsr,
        num_beams: int,
        max_hops: int,
        restrict_vocab: bool = True,
        constraint: Constraint | None = None,
        offset: int = 0,
    ) -> None:
        self.gsr = gsr
        self.num_beams = num_beams
        self.max_hops = max_hops
        self.restrict_vocab = restrict_vocab
        self.constraint = constraint
        self.offset = offset
        self.calls = 0

    def _static(self, vocab: int, step: int, device) -> torch.Tensor:
        allowed = torch.zeros(vocab, dtype=torch.bool, device=device)
        if step < self.max_hops:
            allowed[self.gsr.out_ids.to(device)] = True
        if step > 0:
            allowed[self.gsr.eos_id] = True
        return allowed

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        rows, vocab = scores.shape
        step = input_ids.shape[1] - 1  # tokens generated after the decoder start token
        if self.constraint is None:
            if self.restrict_vocab:
                allowed = self._static(vocab, step, scores.device)
            else:
                allowed = torch.ones(vocab, dtype=torch.bool, device=scores.device)
                if step == 0:
                    allowed[self.gsr.eos_id] = False
                elif step >= self.max_hops:
                    allowed[:] = False
                    allowed[self.gsr.eos_id] = True
            return scores.masked_fill(~allowed.unsqueeze(0), -math.inf)
        allowed = torch.zeros(rows, vocab, dtype=torch.bool)
        prefixes = self.gsr.decode(input_ids)
        out_ids = self.gsr.out_ids
        for row, prefix in enumerate(prefixes):
            if prefix is None:  # cannot happen with masking on; be safe
                allowed[row, self.gsr.eos_id] = True
                continue
            if step < self.max_hops:
                rels = self.constraint(self.offset + row // self.num_beams, prefix)
                if rels.numel():
                    allowed[row, out_ids[rels]] = True
            if step > 0 or not bool(allowed[row].any()):
                allowed[row, self.gsr.eos_id] = True
        return scores.masked_fill(~allowed.to(scores.device), -math.inf)


@torch.inference_mode()
def beam_chains(
    gsr,
    questions: Sequence[str],
    cfg: DecodeConfig | None = None,
    constraint: Constraint | None = None,
    prefix: str = RETRIEVAL_PREFIX,
    device: torch.device | str | None = None,
) -> list[list[BeamChain]]:
    """Top-``cfg.beams`` chains per question, best first (non-finite scores dropped).

    ``constraint(question_position, prefix_chain) -> LongTensor`` of allowed model relation
    indices turns on KG-constrained decoding (``cfg.constrained`` only records the choice).
    """
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import LogitsProcessorList

    cfg = DecodeConfig.from_any(cfg)
    keep_freed_memory()  # beams x vocabulary scores each step: reuse the freed blocks (2x faster on the CPU)
    model = gsr.model
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    out: list[list[BeamChain]] = []
    try:
        # a bar (a line every 30 s in a log file) for long decodes; short validation decodes stay quiet
        with progress(len(questions), "GSR decoding", None, threshold=DECODE_PROGRESS_THRESHOLD) as advance:
            for start in range(0, len(questions), cfg.batch_size):
                chunk = list(questions[start : start + cfg.batch_size])
                enc = gsr.encode(chunk, prefix=prefix).to(device)
                proc = ChainLogitsProcessor(gsr, cfg.beams, cfg.max_hops, cfg.restrict_vocab, constraint, start)
                gen = model.generate(
                    input_ids=enc["input_ids"],
                    attention_mask=enc["attention_mask"],
                    num_beams=cfg.beams,
                    num_return_sequences=cfg.beams,
                    max_new_tokens=cfg.max_hops + 1,
                    length_penalty=cfg.length_penalty,
                    do_sample=False,
                    early_stopping=True,
                    logits_processor=LogitsProcessorList([proc]),
                    output_scores=True,
                    return_dict_in_generate=True,
                )
                chains = gsr.decode(gen.sequences)
                scores = gen.sequences_scores.detach().float().cpu().tolist()
                for i in range(len(chunk)):
                    per_q = []
                    for j in range(i * cfg.beams, (i + 1) * cfg.beams):
                        if math.isfinite(scores[j]):
                            per_q.append(BeamChain(chains[j], scores[j]))
                    per_q.sort(key=lambda b: -b.score)
                    out.append(per_q)
                advance(len(chunk))
    finally:
        model.train(was_training)
    return out


class KGConstraint:
    """Maps model relations <-> KG relation ids and answers "which relations may follow?".

    ``rows[p]`` is the executor row (question graph) of question position ``p``; ``-1``
    when the question has no graph (then nothing is allowed and beams end empty).
    ``shortest``: only relations that move one hop farther from the topic entities.
    """

    def __init__(self, gsr, executor, kg_relations: Sequence[str], rows: Sequence[int], shortest: bool = False) -> None:
        self.executor = executor
        self.rows = list(rows)
        self.shortest = bool(shortest)
        kg_lookup = {r: i for i, r in enumerate(kg_relations)}
        self.model_to_kg = torch.tensor([kg_lookup.get(r, -1) for r in gsr.relations.relations], dtype=torch.long)
        self.kg_to_model = torch.full((len(kg_relations),), -1, dtype=torch.long)
        known = self.model_to_kg >= 0
        self.kg_to_model[self.model_to_kg[known]] = torch.arange(len(gsr.relations))[known]

    def to_kg(self, chain: Sequence[int] | None) -> tuple[int, ...] | None:
        """Model relation indices -> KG relation ids (``None`` if any relation is unknown to the KG)."""
        if chain is None:
            return None
        ids = self.model_to_kg[torch.as_tensor(list(chain), dtype=torch.long)].tolist() if chain else []
        return None if any(i < 0 for i in ids) else tuple(ids)

    def __call__(self, position: int, prefix: tuple[int, ...]) -> torch.Tensor:
        row = self.rows[position]
        if row < 0:
            return torch.zeros(0, dtype=torch.long)
        kg_prefix = self.to_kg(prefix)
        if kg_prefix is None:
            return torch.zeros(0, dtype=torch.long)
        rels = self.executor.allowed_relations(row, kg_prefix, shortest=self.shortest)
        mapped = self.kg_to_model[rels]
        return mapped[mapped >= 0]
