"""The one shape every retriever has, and a registry that builds them by name.

A retriever scores the triples of a split's question graphs: ``score(split)`` returns one float
per edge of the split (``-inf``: not retrieved) and a dict of extra figures (e.g. GSR's chain
validity); what else it reads (the index, embeddings, the encoder) it takes when it is made, from
`RetrievalInputs`. Everything downstream (top-K results files, recall tables, readers, the
robustness study) starts from those scores, so any registered retriever plugs into all of them.
``fit`` (trainable retrievers) and ``save`` / ``load`` are optional: the ones here are either
untrained or load a trained artefact named in their options.

Built in: ``cosine``, ``subgraphrag``, ``gsr``, ``classic-triplets|paths|pcst``, ``ppr``, ``simgrag``
and ``safe`` (`gsr_train.retrievers.registered`).

Add a method: write a class with ``name`` and ``score``, decorate its factory with
``@register("my-method")``; `gsr_train.retrievers.registry.build` ``("my-method", options,
inputs)`` then makes it, and the robustness command takes it by name
(``robustness.retrievers.my-method: {...}``). Outside this package, no registration is needed:
``train.py +experiment=retrieve retriever._target_=my_pkg.module.MyRetriever`` or an entry point
(`gsr_train.retrievers.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from gsr_train.data.errors import UserError
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.plugins import Registry

Scores = tuple[torch.Tensor, dict]
# a key of the extra figures: {field: [value per question]} written into each results row (a node
# scorer's ``answers`` with their probabilities, a path retriever's ``paths``)
ROW_FIELDS = "row_fields"


@dataclass
class RetrievalInputs:
    """What a retriever may read besides the graphs it scores: the index (vocabularies), the
    questions' embeddings (rows in split order), the embedding tables and the split itself."""

    index: KGIndex
    question_emb: torch.Tensor | None = None
    embeddings: Any = None  # gsr_train.text.embeddings.KGEmbeddings
    split: SplitGraphs | None = None  # the split whose questions are served (decoders read its questions)
    split_name: str | None = None  # its name in the index (pattern sources read the split's supervision)
    encoder: Any = None  # a TextEncoder or its config (pattern retrievers embed their patterns' text)
    cache_dir: Any = None  # where derived artefacts are cached (schema graphs, pattern vectors)
    device: Any = None  # where the run computes (its trainer's device); None: the CPU


@runtime_checkable
class Retriever(Protocol):
    """``score(split)`` -> (per-edge scores ``FloatTensor[sum E]``, extra figures)."""

    name: str

    def score(self, split: SplitGraphs) -> Scores: ...


class RetrieverError(UserError, ValueError):
    """An unknown retriever name or a target that is not a retriever."""


Factory = Callable[..., Retriever]  # factory(inputs=RetrievalInputs, **options) -> Retriever
REGISTRY: Registry[Any] = Registry(
    "retriever", error=RetrieverError, group="gsr_train.retrievers", target_option="retriever._target_"
)
register = REGISTRY.register  # decorator: make factory(inputs=RetrievalInputs, **options) buildable as a name
