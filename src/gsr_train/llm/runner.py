"""Shared machinery of the LLM data steps: ask, reuse, write atomically, summarise.

A step turns its inputs into `gsr_train.llm.client.ChatRequest` s, lets
`StepRun` answer them and writes its rows. What every step gets from here:

* resumability: answers come from the response cache, or from the ``raw_response`` of rows
  in a previous output whose ``request_key`` matches (same endpoint, model, prompt and
  sampling), so nothing is asked twice even if the cache was deleted;
* outputs written atomically at the end (the cache holds progress in between, so a kill
  loses nothing and never leaves a half-written file), rows deterministic given the answers;
* a JSON summary next to the output and a printed table of counts, tokens, cost and time.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from gsr_train.eval.markdown import markdown_table
from gsr_train.io import open_text, write_json, write_jsonl
from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult

log = logging.getLogger(__name__)


def to_container(cfg: Any) -> dict:
    """A plain dict from an OmegaConf node (resolved) or a mapping."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg)


def companion(output: str | Path, suffix: str) -> Path:
    """``out/x.jsonl.gz`` -> ``out/x<suffix>`` (summary / responses files next to the output)."""
    output = Path(output)
    name = output.name
    for ext in (".jsonl.gz", ".jsonl", ".json.gz", ".json"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return output.with_name(name + suffix)


def read_jsonl(path: str | Path) -> list[dict]:
    rows = []
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {lineno}: not valid JSON ({e.msg})") from None
    return rows


def previous_answers(path: str | Path | None) -> dict[str, str]:
    """``request_key -> raw_response`` of an earlier output (empty if absent or unreadable)."""
    if path is None or not Path(path).exists():
        return {}
    try:
        rows = read_jsonl(path)
    except (OSError, EOFError, ValueError, gzip.BadGzipFile) as e:
        log.warning("ignoring previous output %s: %s", path, e)
        return {}
    return {
        r["request_key"]: r["raw_response"]
        for r in rows
        if isinstance(r, dict) and isinstance(r.get("request_key"), str) and isinstance(r.get("raw_response"), str)
    }


class StepRun:
    """One run of a data step: client, reuse of earlier answers, timing, summary."""

    def __init__(
        self,
        name: str,
        llm_cfg: Mapping[str, Any] | None,
        output: str | Path,
        reuse_from: str | Path | None = None,
        reuse_output: bool = True,
        client: ChatClient | None = None,
    ):
        self.name = name
        self.output = Path(output)
        self.client = client or ChatClient(llm_cfg or {})
        self._own_client = client is None
        self.reuse = previous_answers(reuse_from or self.output) if reuse_output else {}
        self.t0 = time.perf_counter()
        self.ask_seconds = 0.0

    def ask(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        t = time.perf_counter()
        log.info(
            "%s: %d requests (%d answers known from the previous output)", self.name, len(requests), len(self.reuse)
        )
        try:
            return self.client.run(requests, reuse=self.reuse)
        finally:
            self.ask_seconds += time.perf_counter() - t

    def finish(
        self,
        rows: Sequence[dict],
        counts: Mapping[str, Any],
        extra_outputs: Mapping[Path, Sequence[dict]] | None = None,
        config: Mapping[str, Any] | None = None,
        console: Console | None = None,
    ) -> dict:
        """Write the rows (and companion files) atomically, then the summary; print both tables."""
        for path, extra in dict(extra_outputs or {}).items():
            write_jsonl(path, extra)
        write_jsonl(self.output, rows)
        usage = self.client.stats.to_dict()
        summary = {
            "step": self.name,
            "output": str(self.output),
            "rows": len(rows),
            "counts": dict(counts),
            "llm": {
                "base_url": self.client.base_url,
                "model": self.client.config.model,
                "sampling": self.client.config.sampling(),
            },
            "usage": usage,
            "seconds": round(time.perf_counter() - self.t0, 3),
            "llm_seconds": round(self.ask_seconds, 3),
            "config": _drop_secrets(config or {}),
        }
        summary_path = companion(self.output, ".summary.json")
        write_json(summary_path, summary)
        console = console or Console()
        shown = [(k, v) for k, v in counts.items() if not isinstance(v, (list, dict))]
        title = f"{self.name}: {self.output}"
        console.print(markdown_table(("count", "value"), shown, title=title) + "\n", markup=False, highlight=False)
        self.client.stats.print(
            console, f"{self.name}: LLM usage ({self.client.config.model} at {self.client.base_url})"
        )
        console.print(f"summary: {summary_path}")
        return summary

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> StepRun:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _drop_secrets(cfg: Mapping[str, Any]) -> dict:
    """The config as written to the summary; keys never live in it (only the variable's NAME)."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, Mapping):
            out[k] = _drop_secrets(v)
        elif any(s in k.lower() for s in ("password", "secret", "token_value")) or k.lower() == "api_key":
            out[k] = "***"
        else:
            out[k] = v
    return out
