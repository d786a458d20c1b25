"""A trainable reader as a gsr-train plugin: rank the candidate entities of the retrieved evidence.

gsr-train's reader runner supplies the evidence, the Trainer (callbacks, DDP, ``resume=auto``, the
run folder), the readings before and after training and their scores; a reader writes only how it
prepares a question, how it answers, what it trains and what it saves
(``gsr_train.readers.interface``). This one takes the candidate answers of a question's results
row (the entities its best triples reach, as answer-from-retrieval does), describes each by how
the evidence mentions it (its rank, how often, as a tail, next to a topic entity, whether the
relations that reach it share words with the question) and scores those few numbers with a
small MLP, trained with a listwise loss to put a gold answer first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn

from gsr_train.eval.qa import normalize_answer
from gsr_train.eval.retrieval_answers import candidate_answers
from gsr_train.readers.data import ExampleBatches
from gsr_train.readers.interface import Reading, ReadingInputs, TrainingParts
from gsr_train.readers.prompts import ReaderExample

FEATURES = 8


@dataclass
class RankerExample(ReaderExample):
    candidates: list[str] = field(default_factory=list)
    features: torch.Tensor = field(default_factory=lambda: torch.zeros(0, FEATURES))
    gold: torch.Tensor = field(default_factory=lambda: torch.zeros(0))


def _stems(text: str) -> set[str]:
    return {w[:5] for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) >= 3}


def features(question: str, triples: Sequence[Sequence[str]], candidates: Sequence[str], topics) -> torch.Tensor:
    """One row of FEATURES numbers per candidate (see the module docstring)."""
    asked, topic = _stems(question), {normalize_answer(t) for t in topics}
    index = {normalize_answer(c): i for i, c in enumerate(candidates)}
    out = torch.zeros(len(candidates), FEATURES)
    first = torch.full((len(candidates),), float(len(triples) + 1))
    for rank, (h, r, t) in enumerate(triples):
        words = _stems(r)
        overlap = len(words & asked) / max(len(words), 1)
        for name, other, as_tail in ((t, h, 1.0), (h, t, 0.0)):
            i = index.get(normalize_answer(name))
            if i is None:
                continue
            first[i] = min(first[i], rank)
            out[i, 1] += 1.0
            out[i, 2] += as_tail
            out[i, 3] = max(out[i, 3], overlap)
            out[i, 4] = max(out[i, 4], float(normalize_answer(other) in topic))
    out[:, 2] /= out[:, 1].clamp(min=1)
    out[:, 1] = torch.log1p(out[:, 1])
    out[:, 0] = 1.0 / (1.0 + first)
    out[:, 5] = 1.0 / (1.0 + torch.arange(len(candidates), dtype=torch.float32))  # answer-from-retrieval's order
    out[:, 6] = torch.tensor([len(_stems(c) & asked) > 0 for c in candidates], dtype=torch.float32)
    out[:, 7] = 1.0
    return out


class RankerModule(pl.LightningModule):
    """Listwise loss: minus the log of the softmax mass on the gold candidates (questions with one)."""

    def __init__(self, scorer: nn.Module, lr: float) -> None:
        super().__init__()
        self.scorer, self.lr = scorer, float(lr)
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scorer(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        scores = self(batch["features"]).masked_fill(~batch["mask"], float("-inf"))
        gold = scores.masked_fill(~batch["gold"], float("-inf"))
        loss = (torch.logsumexp(scores, -1) - torch.logsumexp(gold, -1)).mean()
        self.losses.append(float(loss.detach()))
        self.log("train/loss", loss, prog_bar=True, batch_size=scores.shape[0])
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class Collate:
    """Positions -> padded ``features`` [B, C, F], ``mask`` and ``gold`` [B, C]."""

    def __init__(self, examples: Sequence[RankerExample]) -> None:
        self.examples = examples

    def __call__(self, positions) -> dict:
        chosen = [self.examples[int(i)] for i in positions]
        width = max(len(ex.candidates) for ex in chosen)
        batch = {
            "features": torch.zeros(len(chosen), width, FEATURES),
            "mask": torch.zeros(len(chosen), width, dtype=torch.bool),
            "gold": torch.zeros(len(chosen), width, dtype=torch.bool),
        }
        for row, ex in enumerate(chosen):
            n = len(ex.candidates)
            batch["features"][row, :n], batch["mask"][row, :n], batch["gold"][row, :n] = ex.features, True, ex.gold
        return batch


class CandidateRanker:
    """``qa.reading.method=candidate-ranker``: options ``hidden`` (MLP width), ``lr``, ``candidates``
    (the most ranked per question) and ``answers`` (how many it answers with)."""

    name = "CandidateRanker"

    def __init__(
        self, inputs: ReadingInputs, hidden: int = 32, lr: float = 0.1, candidates: int = 30, answers: int = 1
    ) -> None:
        for key, value in (("hidden", hidden), ("candidates", candidates), ("answers", answers)):
            if int(value) < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        if inputs.trained:  # a trained ranker (qa.eval_only=<run>/adapter): its own width
            hidden = json.loads((Path(inputs.trained) / "ranker.json").read_text())["hidden"]
        self.inputs, self.hidden, self.lr = inputs, int(hidden), float(lr)
        self.max_candidates, self.answers = int(candidates), int(answers)
        with torch.random.fork_rng():  # its own initial weights, the run's random state untouched
            torch.manual_seed(int(inputs.seed))
            self.scorer = nn.Sequential(nn.Linear(FEATURES, self.hidden), nn.ReLU(), nn.Linear(self.hidden, 1))
        self.variant = "base"
        if inputs.trained:
            self.scorer.load_state_dict(torch.load(Path(inputs.trained) / "ranker.pt", weights_only=True))
            self.variant = "finetuned"
        self._module: RankerModule | None = None

    def prepare(self, questions, evidence) -> list[ReaderExample]:
        out: list[ReaderExample] = []
        for q in questions:
            row = (evidence or {}).get(q["id"]) or {}
            triples = [t for t in row.get("triples") or [] if len(t) == 3][: max(self.inputs.k, 1)]
            cands = candidate_answers(row, q.get("topics") or ())[: self.max_candidates]
            gold = {normalize_answer(a) for a in q["answers"]}
            out.append(
                RankerExample.of(
                    q,
                    evidence_shown=len(triples),
                    evidence_total=len(row.get("triples") or []),
                    entities=list(cands),
                    candidates=list(cands),
                    features=features(q["question"], triples, cands, q.get("topics") or ()),
                    gold=torch.tensor([normalize_answer(c) in gold for c in cands], dtype=torch.bool),
                )
            )
        return out

    @torch.no_grad()
    def answer(self, batch: Sequence[ReaderExample]) -> list[Reading]:
        self.scorer.eval()
        readings = []
        for ex in batch:
            assert isinstance(ex, RankerExample)
            if not ex.candidates:
                readings.append(Reading("", []))
                continue
            order = torch.argsort(self.scorer(ex.features).squeeze(-1), descending=True, stable=True)
            picked = [ex.candidates[i] for i in order[: self.answers].tolist()]
            readings.append(Reading("\n".join(picked), picked))
        return readings

    def training(self, questions, evidence, batch_size: int) -> TrainingParts:
        """Questions whose candidates hold a gold answer (the others teach a ranking nothing)."""
        examples = [ex for ex in self.prepare(questions, evidence) if bool(getattr(ex, "gold", torch.zeros(0)).any())]
        self._module = RankerModule(self.scorer, self.lr)
        self.scorer.train()
        return TrainingParts(
            self._module, ExampleBatches(len(examples), Collate(examples), batch_size, self.inputs.seed)
        )

    def save(self, folder: Path) -> dict:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.scorer.state_dict(), folder / "ranker.pt")
        (folder / "ranker.json").write_text(json.dumps({"hidden": self.hidden, "features": FEATURES}))
        losses = self._module.losses if self._module is not None else []
        tail = losses[-10:]
        return {"loss_last10": sum(tail) / len(tail) if tail else None, "saved": str(folder)}
