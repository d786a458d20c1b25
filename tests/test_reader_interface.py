"""The Reader interface: found by name, by ``_target_`` and by entry point (an unknown name is one
line), prompt formats as registered objects, and a trainable reader of the user's own trained by the
reader runner through the run's Trainer: resumed mid-epoch with ``resume=auto``, it ends where an
uninterrupted run does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from gsr_train import plugins
from gsr_train.eval.tail import in_run
from gsr_train.readers import registry
from gsr_train.readers.data import ExampleBatches
from gsr_train.readers.interface import (
    REGISTRY,
    Reader,
    Reading,
    ReadingInputs,
    TrainableReader,
    TrainingParts,
    register,
)
from gsr_train.readers.prompts import (
    FORMATS,
    PromptFormat,
    ReaderExample,
    TriplesFormat,
    build_examples,
    parse_response,
    prompt_format,
    register_format,
)

from .conftest import compose_config, quiet

QUESTIONS = [
    {"id": "q1", "question": "what language is spoken in A", "answers": ["L1"], "topics": ["A"]},
    {"id": "q2", "question": "what language is spoken in B", "answers": ["L2"], "topics": ["B"]},
]
EVIDENCE = {
    "q1": {"id": "q1", "triples": [["A", "lang", "L1"], ["A", "capital", "C1"]]},
    "q2": {"id": "q2", "triples": [["B", "capital", "C2"], ["B", "lang", "L2"]]},
}


class FirstTripleTail:
    """The toy reader of docs/how-to/add-a-reader.md: answers with the tail of the best triple."""

    name = "FirstTripleTail"

    def __init__(self, inputs: ReadingInputs, answers: int = 1) -> None:
        if answers < 1:
            raise ValueError(f"answers must be >= 1, got {answers}")

    def prepare(self, questions, evidence):
        rows = evidence or {}
        return [
            ReaderExample.of(q, entities=[t[2] for t in rows.get(q["id"], {}).get("triples", [])[:1]])
            for q in questions
        ]

    def answer(self, batch):
        return [Reading("\n".join(ex.entities), list(ex.entities)) for ex in batch]


class NotAReader:
    def __init__(self, inputs):
        pass


# ---------------------------------------------------------------------------------------- registry


def test_built_in_readers_by_name():
    assert {"causal-lm", "prompted", "retrieval-answers"} <= set(registry.names())
    reader = registry.build("retrieval-answers", {}, ReadingInputs())
    assert isinstance(reader, Reader) and not isinstance(reader, TrainableReader)
    answers = [r.answers for r in reader.answer(reader.prepare(QUESTIONS, EVIDENCE))]
    assert answers == [["L1"], ["C2"]]  # the best triple's tail, the topic entity left out
    assert registry.trainable("causal-lm") and not registry.trainable("prompted")


def test_a_registered_reader_and_one_by_target():
    REGISTRY.pop("first-triple-tail", None)
    register("first-triple-tail")(FirstTripleTail)
    try:
        by_name = registry.build("first-triple-tail", {}, ReadingInputs())
        assert [r.answers for r in by_name.answer(by_name.prepare(QUESTIONS, EVIDENCE))] == [["L1"], ["C2"]]
        with pytest.raises(ValueError, match="already registered"):
            register("first-triple-tail")(NotAReader)
    finally:
        REGISTRY.pop("first-triple-tail")
    target = f"{__name__}.FirstTripleTail"
    by_target = registry.build(None, {"answers": 1}, ReadingInputs(), target=target)
    assert isinstance(by_target, FirstTripleTail) and by_name.name == by_target.name
    with pytest.raises(registry.ReaderError, match=rf"^qa.reading._target_={target}: answers must be >= 1, got 0$"):
        registry.build(None, {"answers": 0}, ReadingInputs(), target=target)
    with pytest.raises(registry.ReaderError, match="does not follow gsr_train.readers.interface.Reader"):
        registry.build(None, {}, ReadingInputs(), target=f"{__name__}.NotAReader")
    with pytest.raises(registry.ReaderError, match="cannot import it"):
        registry.resolve(target="no_such_package.Reader")


def test_entry_points_of_installed_packages_register_their_readers(monkeypatch):
    class EntryPoint:
        name = "from-a-package"
        value = "a_package.readers:FirstTripleTail"

        @staticmethod
        def load():
            return FirstTripleTail

    def entry_points(group, name=None):  # importlib.metadata's selection by group (and name)
        return [EntryPoint()] if group == registry.REGISTRY.group and name in (None, EntryPoint.name) else []

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    monkeypatch.delitem(REGISTRY, "from-a-package", raising=False)
    assert "from-a-package" in registry.names()
    assert registry.build("from-a-package", {}, ReadingInputs()).name == "FirstTripleTail"
    REGISTRY.pop("from-a-package")


def test_an_unknown_reader_is_one_line_listing_the_known_ones():
    with pytest.raises(registry.ReaderError) as caught:
        registry.build("nope", {}, ReadingInputs())
    message = str(caught.value)
    assert "\n" not in message and message.startswith("unknown reader 'nope'; registered: ")
    assert "causal-lm, prompted, retrieval-answers" in message and "qa.reading._target_" in message


def test_an_unknown_reader_stops_the_run_before_any_work(tmp_path):
    from gsr_train.data.errors import UserError
    from gsr_train.runs.reader import run

    cfg = compose_config(
        ["+experiment=reader_webqsp_mini", f"paths.output_dir={tmp_path / 'run'}", "qa.reading.method=nope"]
    )
    with pytest.raises(UserError, match="^unknown reader 'nope'; registered: "):
        run(cfg)
    assert not list((tmp_path / "run").glob("results_test.jsonl*"))


# ----------------------------------------------------------------------------------- prompt formats


@pytest.mark.parametrize(
    "name, cls", [("paths", "PathsFormat"), ("triples", "TriplesFormat"), ("subgraphrag", "SubgraphRAGFormat")]
)
def test_each_prompt_format_is_a_registered_object(name, cls):
    form = FORMATS[name]
    assert isinstance(form, PromptFormat) and type(form).__name__ == cls and form.name == name
    assert prompt_format(name) is form and prompt_format(form) is form
    messages = form.messages("q?", ["line"], True, True)
    assert messages[0]["role"] == "system" and messages[-1]["content"].endswith("Question:\nq?")
    assert parse_response(form.target(["X", "Y"]), name) == ["X", "Y"]  # it reads back what it trains


def test_an_unknown_format_names_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown prompt format 'nope'; registered: paths, subgraphrag, triples$"):
        prompt_format("nope")


def test_a_new_prompt_format_is_one_registered_class(monkeypatch):
    monkeypatch.setattr("gsr_train.readers.prompts.FORMATS", FORMATS.copy())

    @register_format
    class Numbered(TriplesFormat):
        name = "numbered"
        header = "Facts"

        def lines(self, row, triples, k):
            lines, ents = super().lines(row, triples, k)
            return [f"{i + 1}. {line}" for i, line in enumerate(lines)], ents

        def target(self, answers):
            return "; ".join(answers)

        def items(self, text):
            return text.split(";")

    (ex,) = build_examples(QUESTIONS[:1], EVIDENCE, "numbered", 2)
    assert ex.messages[-1]["content"].startswith("Facts:\n1. (A, lang, L1)\n2. (A, capital, C1)")
    assert ex.target == "L1" and parse_response("L1; C1", "numbered") == ["L1", "C1"]
    with pytest.raises(ValueError, match="already registered"):

        @register_format
        class Other(TriplesFormat):
            name = "numbered"


# ------------------------------------------------------------------- a trainable reader, resumed


class _Scores(pl.LightningModule):
    def __init__(self, weights: nn.Linear) -> None:
        super().__init__()
        self.weights = weights

    def training_step(self, batch, batch_idx):
        scores = self.weights(batch["x"]).squeeze(-1)
        return nn.functional.binary_cross_entropy_with_logits(scores, batch["y"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class PositionScorer:
    """A trainable toy: scores the candidates of the evidence (the tails of its triples) by a learnt
    weight per position; saved as ``weights.pt``."""

    name = "PositionScorer"

    def __init__(self, inputs: ReadingInputs, width: int = 3) -> None:
        self.width = int(width)
        with torch.random.fork_rng():
            torch.manual_seed(inputs.seed)
            self.weights = nn.Linear(self.width, 1)
        if inputs.trained:
            self.weights.load_state_dict(torch.load(Path(inputs.trained) / "weights.pt", weights_only=True))
            self.variant = "finetuned"

    def prepare(self, questions, evidence):
        rows = evidence or {}
        out = []
        for q in questions:
            tails = [t[2] for t in rows.get(q["id"], {}).get("triples", [])][: self.width]
            out.append(ReaderExample.of(q, entities=tails))
        return out

    def answer(self, batch):
        out = []
        for ex in batch:
            scores = self.weights.weight[0, : len(ex.entities)].detach()
            best = [ex.entities[int(scores.argmax())]] if ex.entities else []
            out.append(Reading("\n".join(best), best))
        return out

    def training(self, questions, evidence, batch_size):
        items = []
        for ex in self.prepare(questions, evidence):
            for i, e in enumerate(ex.entities):
                items.append((torch.eye(self.width)[i], float(e in ex.answers)))

        def collate(positions):
            chosen = [items[int(p)] for p in positions]
            return {"x": torch.stack([x for x, _ in chosen]), "y": torch.tensor([y for _, y in chosen])}

        self.module = _Scores(self.weights)
        return TrainingParts(self.module, ExampleBatches(len(items), collate, batch_size, seed=0))

    def save(self, folder):
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.weights.state_dict(), folder / "weights.pt")
        return {"weights": self.weights.weight.detach().flatten().tolist()}


def _toy_run(root: Path, out: Path, *extra: str):
    from .test_reader_run import _rows, _write

    data = root / "data"
    if not data.exists():
        data.mkdir(parents=True)
        for split, n in (("train", 6), ("test", 3)):
            rows = _rows(split[:2], n)
            _write(data, split, rows)
            (root / f"results_{split}.jsonl").write_text(
                "".join(json.dumps({"id": r["id"], "triples": r["graph"][::-1]}) + "\n" for r in rows)
            )
    return compose_config(
        [
            "+experiment=reader_webqsp_mini",
            f"paths.output_dir={out}",
            f"paths.cache_dir={root / 'cache'}",
            "experiment_name=test",
            *quiet(),
            "checkpoint_every_n_steps=1",
            f"data.dir={data}",
            "data.splits=[train,test]",
            "data.labels={}",
            f"qa.reading._target_={__name__}.PositionScorer",
            f"qa.retrieval.results.train={root / 'results_train.jsonl'}",
            f"qa.retrieval.results.test={root / 'results_test.jsonl'}",
            "top_k=3",
            "qa.train.epochs=3",
            "qa.train.max_steps=null",
            "qa.train.batch_size=4",
            *extra,
        ]
    )


def test_a_trainable_reader_trains_through_the_runner_and_resumes_mid_epoch(tmp_path):
    from gsr_train.runs.experiment import run_experiment
    from gsr_train.runs.reader import run

    from .test_resume import _Crash

    full, crashed = tmp_path / "full", tmp_path / "crashed"
    run(_toy_run(tmp_path, full))
    figures = json.loads((full / "metrics.json").read_text())
    assert {row["method"] for row in figures["rows"]} == {"PositionScorer", "retrieval"}
    assert set(figures["metrics"]) == {"base_none", "base_retrieved", "finetuned_retrieved", "finetuned_none"}
    assert figures["train"]["steps"] == 15 and figures["train"]["epochs"] == 3  # 18 items of 4: 5 steps x 3
    assert (full / "adapter" / "weights.pt").is_file() and (full / "checkpoints" / "last.ckpt").is_file()
    # the tails of the triples as given: containedby (a country), capital (a city), languages_spoken (the
    # answer); it learns that the answer is the third
    assert figures["metrics"]["finetuned_retrieved"]["sub"]["metrics"]["hit@1"] == 1.0

    crash = ["+callbacks.crash._target_=tests.test_resume._CrashAtStep", "+callbacks.crash.step=7"]
    with pytest.raises(_Crash):
        run_experiment(_toy_run(tmp_path, crashed, *crash))
    assert torch.load(crashed / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 7
    run_experiment(_toy_run(tmp_path, crashed, "resume=auto"))
    resumed = json.loads((crashed / "metrics.json").read_text())
    assert in_run(crashed, resumed["train"]["resumed_from"]) == crashed / "checkpoints" / "last.ckpt"
    assert resumed["train"]["steps"] == 15
    assert resumed["train"]["weights"] == pytest.approx(figures["train"]["weights"], abs=1e-6)
    assert resumed["metrics"] == figures["metrics"]

    # the trained reader, loaded back (what eval.py ckpt_path=<run> does)
    again = tmp_path / "again"
    run(_toy_run(tmp_path, again, f"qa.eval_only={full / 'adapter'}", "qa.eval.variants.finetuned=[retrieved]"))
    scored = json.loads((again / "metrics.json").read_text())["metrics"]
    assert scored == {"finetuned_retrieved": figures["metrics"]["finetuned_retrieved"]}


def test_one_key_chooses_the_reader_and_the_old_backend_spelling_warns_once(caplog):
    """Issue 49: ``qa.reading`` chooses the reader, read once (`reader_choice`); ``qa.backend``, the old
    spelling, still chooses when ``qa.reading.method`` is at its default, with one warning a process."""
    from gsr_train.options.check import built
    from gsr_train.readers.options import QARun
    from gsr_train.runs import reader as reader_run

    def choice(**qa):
        return reader_run.reader_choice(built(QARun, qa))

    assert choice(reading={"method": "prompted", "options": {"a": 1}}) == reader_run.ReaderChoice(
        "prompted", None, {"a": 1}
    )
    assert choice(reading={"_target_": "pkg.Reader"}).target == "pkg.Reader"
    assert choice(reading={"method": None}).name == "causal-lm"  # a run folder written before the default
    reader_run._spelled_now.cache_clear()
    with caplog.at_level("WARNING", logger=reader_run.__name__):
        assert choice(backend="llm", reading={"method": "causal-lm"}).name == "prompted"
        assert choice(backend="llm", reading={"method": "retrieval-answers"}).name == "retrieval-answers"
        assert choice(backend="llm").name == "prompted"
    said = [r.getMessage() for r in caplog.records]
    assert said.count("qa.backend=llm is spelled qa.reading.method=prompted now; qa.backend will go") == 1
