"""Stages the three LLM data steps share, written once.

Every step windows its inputs (``offset`` / ``limit``), builds one chat request per item
from a system and a user prompt, asks them through a `gsr_train.llm.runner.StepRun`
(response cache, reuse of a previous output, ``on_error`` policy), turns the answers into
rows and writes a summary whose counts come in a fixed reading order. The step-specific
parts (inputs, row building, which counts) stay in the step modules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult
from gsr_train.llm.prompts import load_prompt, messages
from gsr_train.llm.runner import StepRun

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def window(items: list[T], cfg: Mapping[str, Any]) -> list[T]:
    """The ``offset`` / ``limit`` slice of a step's items, so a long job can be run (or tried) in parts."""
    offset, limit = int(cfg.get("offset") or 0), cfg.get("limit")
    return items[offset : None if limit is None else offset + int(limit)]


class Prompts:
    """The step's system and user prompt templates (``cfg.prompt.system`` / ``.user``), loaded once."""

    def __init__(self, cfg: Mapping[str, Any], tag: str):
        self.system = load_prompt(cfg["prompt"]["system"])
        self.user = load_prompt(cfg["prompt"]["user"])
        self.tag = tag

    def request(self, key: str, **fields: Any) -> ChatRequest:
        """One request named ``key``; ``fields`` fill the templates (``"<tag> <key>"`` names it in errors)."""
        return ChatRequest(key, messages(self.system, self.user, f"{self.tag} {key}", **fields))


def open_step(
    name: str, cfg: Mapping[str, Any], client: ChatClient | None, reuse_from: str | Path | None = None
) -> StepRun:
    """The step's run: its LLM config, output path and whether a previous output's answers are reused."""
    return StepRun(
        name,
        cfg.get("llm"),
        cfg["output"],
        reuse_from=reuse_from,
        reuse_output=cfg.get("reuse_output", True),
        client=client,
    )


def ask_answers(
    step: StepRun, keys: Sequence[K], requests: Sequence[ChatRequest]
) -> tuple[list[tuple[K, ChatResult]], list[K]]:
    """Ask every request; ``(key, result)`` of those answered and the keys of those that were not.

    The error policy is the client's (``on_error``): with ``raise`` a failure stops the run
    here, with ``skip`` the request comes back without text and the step leaves it out of its
    rows and lists it in the summary (see `note_skipped`). Both lists keep request order.
    """
    answered, skipped = [], []
    for key, res in zip(keys, step.ask(requests)):
        if res.text is None:  # not res.ok
            skipped.append(key)
        else:
            answered.append((key, res))
    return answered, skipped


def ordered_counts(counts: Counter, first: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The summary's counts in reading order: ``first``, then ``keys`` (0 when never counted),
    then every other count by name (e.g. ``parsed_by_*``)."""
    ordered: dict[str, Any] = dict(first)
    ordered.update({k: counts[k] for k in keys})
    ordered.update({k: v for k, v in sorted(counts.items()) if k not in ordered})
    return ordered


def note_skipped(ordered: dict[str, Any], skipped: Sequence[Any], list_name: str) -> None:
    """Add how many requests were skipped after errors and, if any, which (under ``list_name``).

    A summary that already has ``requests_skipped_after_errors`` keeps it where it stands.
    """
    ordered["requests_skipped_after_errors"] = len(skipped)
    if skipped:
        ordered[list_name] = list(skipped)


def data_dir(cfg: Mapping[str, Any]) -> str | None:
    """The step's data folder or hub name (``data.dir=``, the option train.py and eval.py use)."""
    data = cfg.get("data")
    return str(data["dir"]) if isinstance(data, Mapping) and data.get("dir") else None
