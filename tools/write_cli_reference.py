"""Write docs/reference/cli.md, every ``gsr-train`` verb's ``--help`` as the CLI prints it
(:func:`gsr_train.cli.reference`); tests/test_cli.py fails while the committed page differs.

    python tools/write_cli_reference.py
"""

from __future__ import annotations

from pathlib import Path

from gsr_train.cli import reference
from gsr_train.io import atomic_write

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md"

if __name__ == "__main__":
    text = reference()
    if PAGE.exists() and PAGE.read_text(encoding="utf-8") == text:
        print(f"{PAGE} is current")
    else:
        with atomic_write(PAGE, "w") as f:
            f.write(text)
        print(f"wrote {PAGE}")
