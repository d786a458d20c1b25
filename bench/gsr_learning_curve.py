"""A GSR run's learning curve: validation match@1 / @n with 95% intervals against epochs.

    python bench/gsr_learning_curve.py RUN_DIR [--figure PNG] [--table MD]

Reads ``RUN_DIR/val_curve.json`` (written by every GSR run with validation: one row per validation,
each figure with its bootstrap interval) and, when there, ``RUN_DIR/metrics.json`` (the best epoch and
the test chain match of its checkpoint). Draws both curves with their intervals as bands and the best
epoch as a dashed line (``--figure``, default ``RUN_DIR/learning_curve.png``), and prints the
markdown table of the curve (also written to ``--table`` when given).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def load_curve(run: Path) -> tuple[list[dict[str, Any]], int]:
    """The curve's rows and n of its match@n (the largest ``match@N`` key other than 1)."""
    path = run / "val_curve.json"
    if not path.is_file():
        raise SystemExit(f"{run}: no val_curve.json (a GSR run with validation writes one)")
    rows = json.loads(path.read_text())["epochs"]
    if not rows:
        raise SystemExit(f"{path}: no validation rows")
    ns = {int(m.group(1)) for k in rows[0] for m in [re.fullmatch(r"match@(\d+)", k)] if m}
    return rows, max(ns - {1}, default=1)


def best_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row with the highest match@1 (the first of ties, as the checkpoint callback keeps it)."""
    return max(rows, key=lambda r: (r["match@1"], -r["epoch"]))


def table(rows: list[dict[str, Any]], n: int) -> str:
    from gsr_train.eval.intervals import format_estimate

    best = best_row(rows)["epoch"]
    lines = [f"| epoch | val match@1 | val match@{n} |", "|---:|---|---|"]
    for r in rows:
        mark = " (best)" if r["epoch"] == best else ""
        cells = [format_estimate(r[k], r[f"{k}_low"], r[f"{k}_high"]) for k in ("match@1", f"match@{n}")]
        lines.append(f"| {r['epoch'] + 1}{mark} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def figure(rows: list[dict[str, Any]], n: int, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] + 1 for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for key, colour in (("match@1", "tab:blue"), (f"match@{n}", "tab:orange")):
        ax.plot(epochs, [r[key] for r in rows], marker="o", color=colour, label=f"val {key}")
        ax.fill_between(
            epochs, [r[f"{key}_low"] for r in rows], [r[f"{key}_high"] for r in rows], color=colour, alpha=0.2
        )
    ax.axvline(best_row(rows)["epoch"] + 1, color="grey", linestyle="--", label="best epoch (match@1)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("ground-chain match (95% interval)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a GSR run folder (with val_curve.json)")
    ap.add_argument("--figure", type=Path, default=None, help="the PNG (default RUN/learning_curve.png)")
    ap.add_argument("--table", type=Path, default=None, help="also write the markdown table here")
    ap.add_argument("--title", default="GSR learning curve (validation)")
    args = ap.parse_args()
    rows, n = load_curve(args.run)
    out = args.figure or args.run / "learning_curve.png"
    figure(rows, n, out, args.title)
    text = table(rows, n)
    print(text)
    if args.table:
        from gsr_train.io import atomic_write

        with atomic_write(args.table, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
