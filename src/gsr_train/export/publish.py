"""Upload an exported folder to the Hugging Face Hub (``gsr-train publish OUT --repo_id ORG/NAME``).

The token comes only from the environment (``HF_TOKEN``, or the variable named by
``token_env``); it is passed to ``HfApi`` in memory and never written, printed or logged.
Before anything is uploaded every file of the folder is checked not to contain the token
(nor any other secret-looking environment value): an export that does is refused.
``dry_run`` prints what would be uploaded (files, sizes, the model card) and touches no
network.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsr_train.export.card import secret_values

log = logging.getLogger(__name__)

# hidden files and folders at any depth, temporary files, bytecode; the Hub client adds its own
# defaults (.git, .cache/huggingface), which the plan applies too, so a dry run lists exactly the upload
IGNORE = (".*", "*/.*", "*.tmp", "__pycache__/*", "*/__pycache__/*")


def upload_list(folder: Path) -> list[str]:
    """The relative paths ``HfApi.upload_folder(folder, ignore_patterns=IGNORE)`` uploads, by the
    Hub client's own filter (same patterns, same defaults)."""
    # lazy: the Hub client is only needed when publishing or downloading
    from huggingface_hub.hf_api import DEFAULT_IGNORE_PATTERNS

    # lazy: the Hub client is only needed when publishing or downloading
    from huggingface_hub.utils import filter_repo_objects

    paths = sorted(p.relative_to(folder).as_posix() for p in folder.glob("**/*") if p.is_file())
    return list(filter_repo_objects(paths, ignore_patterns=[*IGNORE, *DEFAULT_IGNORE_PATTERNS]))


@dataclass
class PublishPlan:
    folder: Path
    repo_id: str
    private: bool
    files: list[tuple[str, int]] = field(default_factory=list)  # (relative path, bytes)
    card: str = ""
    url: str | None = None

    def describe(self) -> str:
        lines = [
            f"repo: {self.repo_id} ({'private' if self.private else 'public'}) <- {self.folder}",
            f"{len(self.files)} files, {sum(s for _, s in self.files):,} bytes:",
        ]
        lines += [f"  {name}  ({size:,} bytes)" for name, size in self.files]
        lines += ["", "model card (README.md):", "-" * 60, self.card, "-" * 60]
        return "\n".join(lines)


def plan(folder: str | Path, repo_id: str, private: bool = False) -> PublishPlan:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder (run `gsr-train export` first)")
    if "/" not in repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"--repo_id must be ORG/NAME, got {repo_id!r}")
    card = folder / "README.md"
    if not card.exists():
        raise FileNotFoundError(f"{folder}: no README.md model card (export the folder with `gsr-train export`)")
    files = [(name, (folder / name).stat().st_size) for name in upload_list(folder)]
    return PublishPlan(folder, repo_id, private, files, card.read_text(encoding="utf-8"))


def check_no_secrets(folder: Path, secrets: list[str]) -> None:
    """Refuse to publish a folder in which any secret value appears (any file, any encoding as bytes)."""
    needles = [s.encode() for s in secrets]
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if any(n in data for n in needles):
            raise RuntimeError(f"{p}: contains the value of a secret environment variable; refusing to publish")


def publish(
    folder: str | Path,
    repo_id: str,
    private: bool = False,
    dry_run: bool = False,
    token_env: str = "HF_TOKEN",
    api: Any = None,
    commit_message: str | None = None,
    out=print,
) -> PublishPlan:
    """Create ``repo_id`` (if needed) and upload ``folder``; ``dry_run``: only print the plan."""
    p = plan(folder, repo_id, private)
    token = os.environ.get(token_env) or None
    secrets = sorted(set(secret_values()) | ({token} if token else set()), key=len, reverse=True)
    check_no_secrets(p.folder, secrets)
    if dry_run:
        out("DRY RUN: nothing is uploaded")
        out(p.describe())
        out(f"token: {'found in $' + token_env if token else 'NOT set ($' + token_env + ')'}")
        return p
    if token is None:
        raise RuntimeError(f"no Hugging Face token: set ${token_env} (it is read from the environment only)")
    if api is None:
        from huggingface_hub import HfApi  # lazy: the Hub client is only needed when publishing or downloading

        api = HfApi()
    api.create_repo(repo_id=repo_id, private=private, exist_ok=True, repo_type="model", token=token)
    commit = api.upload_folder(
        folder_path=str(p.folder),
        repo_id=repo_id,
        repo_type="model",
        token=token,
        commit_message=commit_message or f"gsr-train export ({len(p.files)} files)",
        ignore_patterns=list(IGNORE),
    )
    p.url = str(getattr(commit, "commit_url", None) or commit)
    out(f"uploaded {len(p.files)} files to {repo_id}: {p.url}")
    return p
