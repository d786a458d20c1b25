"""The one shape every reader has, and a registry that builds them by name.

A reader answers questions from retrieved evidence, in two steps:

* ``prepare(questions, evidence)``: the questions (dicts with ``id``, ``question``, ``answers``,
  ``in_kg``, ``hops`` and ``topics``, the names of the question's topic entities) and their
  retrieval results rows by question id (``None``: closed book) become one
  `gsr_train.readers.prompts.ReaderExample` each (a prompt, candidate entities: whatever
  the reader reads; a reader that needs more per question subclasses it);
* ``answer(batch)``: one `Reading` per example, the raw response and the answers read from
  it. The runner hands every question of a variant over at once; a reader batches inside.

A trainable reader (`TrainableReader`) also gives the LightningModule and DataModule it
trains with (``training``) and writes what it learnt into a folder (``save``); the reader runner
(`gsr_train.runs.reader`) trains it with the run's Trainer, callbacks, DDP, ``resume=auto``
and run folder, and a later run loads the folder back (``qa.eval_only=<run>/adapter``, what
``eval.py ckpt_path=<run>`` sets) through `ReadingInputs.trained`.

Optional attributes the runner reads: ``variant`` (the prefix of the rows it answers before any
training here: ``base``, default; ``finetuned`` when loaded trained; ``prompting``), ``figures``
(a dict kept in ``metrics.json``'s ``train``), and ``__enter__`` / ``__exit__`` (a reader that holds
something while it reads, e.g. a served model, is entered around the reading).

Built in (`gsr_train.readers.registered`): ``causal-lm`` (a local causal LM, LoRA / QLoRA /
full fine-tuning: ``reader=...``), ``prompted`` (an LLM behind an OpenAI-compatible endpoint:
``llm=...``) and ``retrieval-answers`` (the evidence's top candidate entity, no reading). A reader
outside this package needs no registration: ``qa.reading._target_=my_pkg.MyReader`` or an entry
point in the group ``gsr_train.readers`` (`gsr_train.readers.registry`). Every one is made as
``Reader(inputs=ReadingInputs, **qa.reading.options)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gsr_train.data.errors import UserError
from gsr_train.plugins import Registry
from gsr_train.readers.prompts import ReaderExample

Question = Mapping[str, Any]  # id, question, answers, in_kg, hops, topics
Evidence = Mapping[str, Mapping[str, Any]] | None  # question id -> results row; None: closed book


@dataclass
class ReadingInputs:
    """What a reader may read besides its own options: the run's reading recipe (``qa``), the LLM
    sections (``reader=``, ``llm=``), where to cache and compute, and whether this run trains it."""

    format: str = "subgraphrag"  # qa.format: a registered prompt format (readers.prompts.FORMATS)
    k: int = 100  # top_k: evidence lines per question, best first (0: closed book)
    max_prompt_tokens: int | None = None  # the whole prompt's token budget (None: no bound)
    icl: bool = True  # the format's in-context example
    seed: int = 0
    train: Mapping[str, Any] = field(default_factory=dict)  # qa.train (the training recipe)
    eval: Mapping[str, Any] = field(default_factory=dict)  # qa.eval (batch_size, max_new_tokens, variants)
    merge: bool = False  # qa.merge: also write a merged copy of a LoRA-tuned model
    model: Mapping[str, Any] = field(default_factory=dict)  # reader=: the causal LM and how it trains
    llm: Mapping[str, Any] = field(default_factory=dict)  # llm=: the endpoint of a prompted reader
    trained: str | None = None  # qa.eval_only: a trained reader's folder, loaded instead of training
    trains: bool = False  # this run trains the reader (the train split's evidence is read)
    index: Any = None  # the run's KGIndex (vocabularies)
    cache_dir: Path | None = None
    device: Any = None  # the run's device (its trainer's); None: the CPU


@dataclass
class Reading:
    """One answered question: the reader's raw response and the answers read from it, best first."""

    text: str
    answers: list[str]


@runtime_checkable
class Reader(Protocol):
    """``prepare(questions, evidence)`` -> examples; ``answer(examples)`` -> one reading each.
    ``name`` is what the tables call it (a metrics row's ``method``)."""

    name: str

    def prepare(self, questions: Sequence[Question], evidence: Evidence) -> list[ReaderExample]: ...

    def answer(self, batch: Sequence[ReaderExample]) -> list[Reading]: ...


@dataclass
class TrainingParts:
    """What a trainable reader trains: its LightningModule and the DataModule of its examples."""

    module: Any  # pytorch_lightning.LightningModule
    datamodule: Any  # pytorch_lightning.LightningDataModule


@runtime_checkable
class TrainableReader(Reader, Protocol):
    """A reader the run trains. ``training(questions, evidence, batch_size)`` (the train split;
    ``batch_size`` is this process's share of ``qa.train.batch_size``) gives the module and data the
    run's Trainer fits (``qa.train``: epochs, max_steps, accumulate, gradient_clip_val); after the fit,
    global rank 0 calls ``save(folder)``, which writes what it learnt (loaded back through
    `ReadingInputs.trained`) and returns its training figures."""

    def training(self, questions: Sequence[Question], evidence: Evidence, batch_size: int) -> TrainingParts: ...

    def save(self, folder: Path) -> dict: ...


class ReaderError(UserError, ValueError):
    """An unknown reader name, a target that is not a reader, or options its factory refuses."""


Factory = Callable[..., Reader]  # factory(inputs=ReadingInputs, **options) -> Reader (a reader class, as a rule)
REGISTRY: Registry[Factory] = Registry(
    "reader", error=ReaderError, group="gsr_train.readers", target_option="qa.reading._target_"
)
register = REGISTRY.register  # decorator: make a factory buildable as qa.reading.method=NAME


def is_trainable(factory: Any) -> bool:
    """Does ``factory`` make a trainable reader? A class with ``training`` and ``save``, or a factory
    function that says so (``factory.trainable = True``)."""
    if isinstance(factory, type):
        return all(callable(getattr(factory, m, None)) for m in ("training", "save"))
    return bool(getattr(factory, "trainable", False))
