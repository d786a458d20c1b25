"""Token, request and cost accounting for one job, printed as a table at the end.

Fresh requests cost money; cached ones (from the response cache or from a previous output
file) cost nothing but their tokens are shown too, so a user sees what the cache saved.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field

from rich.console import Console

from gsr_train.eval.markdown import markdown_table


@dataclass
class UsageStats:
    price_input_per_m: float = 0.0  # currency units per 1M prompt tokens
    price_output_per_m: float = 0.0  # per 1M completion tokens
    fresh: int = 0  # answered by the endpoint in this run
    cached: int = 0  # answered from the response cache
    reused: int = 0  # answered from a previous output file
    failed: int = 0  # gave up after retries (raised)
    skipped: int = 0  # gave up after retries, counted and skipped (on_error=skip)
    retries: int = 0  # extra attempts made
    truncated: int = 0  # finish_reason == "length"
    usage_missing: int = 0  # fresh responses without a usage block
    prompt_tokens: int = 0  # fresh
    completion_tokens: int = 0  # fresh
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    fresh_seconds: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_input_per_m + completion_tokens * self.price_output_per_m) / 1e6

    def add_response(self, body: dict, source: str, seconds: float | None = None) -> None:
        usage = body.get("usage") or {}
        p, c = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        finish = ((body.get("choices") or [{}])[0] or {}).get("finish_reason")
        with self._lock:
            if finish == "length":
                self.truncated += 1
            if source == "fresh":
                self.fresh += 1
                self.prompt_tokens += p
                self.completion_tokens += c
                self.usage_missing += not usage
                if seconds is not None:
                    self.fresh_seconds.append(seconds)
            else:
                if source == "cache":
                    self.cached += 1
                else:
                    self.reused += 1
                self.cached_prompt_tokens += p
                self.cached_completion_tokens += c

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + n)

    @property
    def seconds_per_request(self) -> float | None:
        return statistics.fmean(self.fresh_seconds) if self.fresh_seconds else None

    def to_dict(self) -> dict:
        spr = self.seconds_per_request
        return {
            "requests": self.fresh + self.cached + self.reused + self.failed + self.skipped,
            "fresh": self.fresh,
            "cached": self.cached,
            "reused_from_output": self.reused,
            "failed": self.failed,
            "skipped": self.skipped,
            "retries": self.retries,
            "truncated": self.truncated,
            "usage_missing": self.usage_missing,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "cached_completion_tokens": self.cached_completion_tokens,
            "cost": round(self.cost(self.prompt_tokens, self.completion_tokens), 6),
            "cost_saved": round(self.cost(self.cached_prompt_tokens, self.cached_completion_tokens), 6),
            "seconds_per_fresh_request": None if spr is None else round(spr, 4),
            "median_seconds_per_fresh_request": (
                round(statistics.median(self.fresh_seconds), 4) if self.fresh_seconds else None
            ),
        }

    def table(self, title: str = "LLM usage") -> str:
        """The usage as a Markdown table (the style of every table gsr-train prints), its notes below."""
        d = self.to_dict()
        rows = [
            ("fresh", d["fresh"], d["prompt_tokens"], d["completion_tokens"], f"{d['cost']:.4f}"),
            (
                "cached / reused",
                f"{d['cached']} / {d['reused_from_output']}",
                d["cached_prompt_tokens"],
                d["cached_completion_tokens"],
                f"saved {d['cost_saved']:.4f}",
            ),
            ("failed / skipped", f"{d['failed']} / {d['skipped']}", "", "", ""),
        ]
        spr = d["seconds_per_fresh_request"]
        notes = (
            f"retries {d['retries']}, truncated (finish=length) {d['truncated']}, "
            f"usage missing {d['usage_missing']}, "
            + (
                f"{spr:.3f} s per fresh request (median {d['median_seconds_per_fresh_request']:.3f})"
                if spr is not None
                else "no fresh requests"
            )
        )
        cols = ("", "requests", "prompt tokens", "completion tokens", "cost")
        return markdown_table(cols, rows, title=title) + "\n\n" + notes

    def print(self, console: Console | None = None, title: str = "LLM usage") -> None:
        (console or Console()).print(self.table(title), markup=False, highlight=False)
