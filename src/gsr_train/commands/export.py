"""``gsr-train export`` and ``gsr-train publish``: a trained model as a Hugging Face folder with a
model card, and that folder on the Hub."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import existing_paths
from gsr_train.data.errors import folder_write_error


def command(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="run folder, Lightning .ckpt, GSR model folder or peft adapter folder",
            callback=existing_paths,
        ),
    ],
    out: Annotated[str, typer.Argument(metavar="OUT", help="output folder (replaced atomically)")],
    kind: Annotated[str | None, typer.Option("--kind", help="subgraphrag | gsr | reader (default: detected)")] = None,
    repo_id: Annotated[str | None, typer.Option("--repo_id", help="Hub name the card's loading snippet uses")] = None,
) -> int:
    """Export a trained model to a Hugging Face folder with a model card."""
    if kind not in (None, "subgraphrag", "gsr", "reader"):
        raise typer.BadParameter(f"{kind!r}: one of subgraphrag, gsr, reader", param_hint="--kind")
    from gsr_train.export.exporters import export_model  # lazy: torch (publish --help needs none)

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        info = export_model(source, out, kind=kind, repo_id=repo_id)
    except OSError as e:  # a read-only or full disk is the user's to fix, not a traceback
        error = folder_write_error(e, Path(out).parent, "the exported model", "choose a writable OUT")
        if error is None:
            raise
        raise error from e
    print(f"exported {info['kind']} model from {info['source']} to {out}")
    for name in info["files"]:
        print(f"  {name}")
    if info.get("metrics"):
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in list(info["metrics"].items())[:8]))
    return 0


def publish(
    folder: Annotated[
        str, typer.Argument(metavar="FOLDER", help="a folder written by gsr-train export", callback=existing_paths)
    ],
    repo_id: Annotated[str, typer.Option("--repo_id", help="ORG/NAME on the Hub")],
    private: Annotated[bool, typer.Option("--private", help="create the repository private")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry_run", help="print the files and the model card; upload nothing")
    ] = False,
    token_env: Annotated[str, typer.Option("--token_env", help="environment variable holding the token")] = "HF_TOKEN",
    message: Annotated[str | None, typer.Option("--message", help="commit message")] = None,
) -> int:
    """Upload an exported folder to the Hugging Face Hub."""
    from gsr_train.export.publish import publish as publish_folder  # lazy: huggingface_hub

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    publish_folder(folder, repo_id, private=private, dry_run=dry_run, token_env=token_env, commit_message=message)
    return 0
