"""Prompt files: package data under ``gsr_train/prompts``, or any file the user points to.

Prompts are plain text with ``$name`` placeholders (`string.Template`), kept out of the
code so they can be read, reviewed and changed without touching Python. Their text is part of
every request, so changing a prompt changes the cache keys: old answers are not reused for
the new prompt.
"""

from __future__ import annotations

import importlib.resources
import string
from pathlib import Path


def load_prompt(name_or_path: str | Path) -> str:
    """A packaged prompt by name (``"select_chains_system"``) or a file path."""
    path = Path(name_or_path)
    if path.suffix == ".txt" and path.exists():
        return path.read_text(encoding="utf-8")
    res = importlib.resources.files("gsr_train") / "prompts" / f"{name_or_path}.txt"
    if not res.is_file():
        raise FileNotFoundError(
            f"prompt {str(name_or_path)!r}: no such file, and no packaged prompt gsr_train/prompts/{name_or_path}.txt"
        )
    return res.read_text(encoding="utf-8")


def render(template: str, where: str = "prompt", **values) -> str:
    """Fill ``$name`` placeholders; a placeholder without a value is an error naming it."""
    try:
        return string.Template(template).substitute(**values).strip()
    except KeyError as e:
        raise KeyError(f"{where}: placeholder ${e.args[0]} has no value (have {sorted(values)})") from None
    except ValueError as e:
        raise ValueError(f"{where}: bad placeholder ({e}); write $$ for a literal $") from None


def messages(system: str, user: str, where: str = "prompt", **values) -> list[dict]:
    """Chat messages from a system and a user template."""
    return [
        {"role": "system", "content": render(system, f"{where} (system)", **values)},
        {"role": "user", "content": render(user, f"{where} (user)", **values)},
    ]
