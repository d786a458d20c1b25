"""The retrievers of the robustness study, built by name through `gsr_train.retrievers.registry`:
each maps a (perturbed) split to per-edge scores plus extra figures. Nothing is trained here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.retrievers.interface import RetrievalInputs, Scores
from gsr_train.retrievers.registry import build


def build_retrievers(
    cfg: Mapping[str, Any],
    index: KGIndex,
    split: SplitGraphs,
    question_emb: torch.Tensor,
    emb,
    classic_options: Mapping[str, Any] | None = None,
    split_name: str | None = None,
    encoder: Any = None,
    cache_dir: Any = None,
    device: Any = None,
) -> dict[str, Callable[[SplitGraphs], Scores]]:
    """The retrievers named in ``cfg`` (the ``robustness.retrievers`` block: ``name: options`` for
    any registered retriever; ``classic: [methods]`` as a shorthand); unset artefacts are skipped."""
    inputs = RetrievalInputs(index, question_emb, emb, split, split_name, encoder, cache_dir, device)
    out: dict[str, Callable[[SplitGraphs], Scores]] = {}
    for name, options in cfg.items():
        if name == "classic":
            for method in options or []:
                out[f"classic-{method}"] = build(f"classic-{method}", classic_options, inputs).score
            continue
        options = dict(options or {})
        if not options.pop("enabled", True):
            continue
        if name == "subgraphrag" and not options.get("checkpoint"):
            continue
        if name == "gsr" and not (options.get("model") or options.get("results")):
            continue
        out[name] = build(name, options, inputs).score
    if not out:
        raise ValueError("robustness: no retriever enabled (set robustness.retrievers.*)")
    return out
