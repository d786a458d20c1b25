"""Open-vocabulary relation heads for the MiniLM GSR (``model.relation_head: open``).

A token GSR learns one input and one output vector per relation, from the chains and indexing
examples that use it: a relation no training chain uses is rarely decoded, and a relation of
another KG has no vector at all. Here the decoder's vector of relation ``k`` is computed from the
relation's *text*: the frozen sentence-encoder embedding of its name split into words
(``people person place of birth``), through a learned projection, plus an optional learned
per-relation residual for the relations seen in training. The same table is the decoder's input
embedding and its output layer (tied, as in the token model), so any relation of any KG can be
scored and decoded: `OpenRelationTable.set_relations` swaps in a new relation list (the
residuals of known names are kept, new names get none) without retraining.

MiniLM ids follow the compact layout: ``0 pad, 1 start, 2 eos``, relation ``k`` is ``3 + k``
(the table's three special rows). A T5 keeps its word vocabulary (``base`` ids, its own
embedding and output rows: the encoder reads words, the decoder emits EOS) and relation ``k`` is
id ``base + k``, read from a table without special rows (`install_t5`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from gsr_train.features.relation_tokens import relation_words
from gsr_train.text.encoders import load_encoder

if TYPE_CHECKING:
    from gsr_train.text.encoders import TextEncoder

SPECIALS = 3
_ENCODERS: dict[str, TextEncoder] = {}


def relation_texts(names: Sequence[str]) -> list[str]:

    return [relation_words(n) for n in names]


def text_features(names: Sequence[str], encoder: TextEncoder | None = None) -> torch.Tensor:
    """``[R, D]`` float32 sentence embeddings of the relations' words (MiniLM, normalised)."""
    if encoder is None:
        encoder = _ENCODERS.get("minilm") or _ENCODERS.setdefault("minilm", load_encoder("minilm"))
    if not names:
        return torch.zeros(0, int(encoder.dim))
    with torch.no_grad():
        return encoder.encode(relation_texts(names), progress=False).float()


class OpenRelationTable(nn.Module):
    """The ``[3 + R, H]`` table shared by the decoder's input embedding and output layer."""

    # buffers and parameters registered (and replaced) by name: declared for the type checker
    text: torch.Tensor
    residual_mask: torch.Tensor
    residual: nn.Parameter | None

    def __init__(
        self,
        text: torch.Tensor,
        hidden: int,
        specials: torch.Tensor | None = None,
        residual: bool = True,
        residual_dropout: float = 0.0,
        num_specials: int = SPECIALS,
    ) -> None:
        super().__init__()
        dim = text.shape[1]
        self.register_buffer("text", text.float().clone())
        self.specials = nn.Parameter(
            specials.clone() if specials is not None else torch.randn(num_specials, hidden) * 0.02
        )
        self.proj = nn.Linear(dim, hidden)
        with torch.no_grad():  # start as the identity when the sizes match: the text vectors themselves
            if dim == hidden:
                self.proj.weight.copy_(torch.eye(hidden))
            self.proj.bias.zero_()
        self.bias_proj = nn.Linear(dim, 1)  # output bias of a relation, from its text too
        nn.init.zeros_(self.bias_proj.weight)
        nn.init.zeros_(self.bias_proj.bias)
        self.special_bias = nn.Parameter(torch.zeros(self.specials.shape[0]))
        self.residual = nn.Parameter(torch.zeros(text.shape[0], hidden)) if residual else None
        # 1 for relations the residual was trained for, 0 for relations added at decode time
        self.register_buffer("residual_mask", torch.ones(text.shape[0], 1))
        # training drops whole relations' residuals, so the projection of the text alone must
        # carry them: what a relation never seen in training has to rely on
        if not 0.0 <= float(residual_dropout) < 1.0:
            raise ValueError(f"relation residual dropout must be in [0, 1), got {residual_dropout}")
        self.residual_dropout = float(residual_dropout)
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def num_relations(self) -> int:
        return int(self.text.shape[0])

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(table ``[3 + R, H]``, output bias ``[3 + R]``); cached while gradients are off."""
        if self._cache is not None and not torch.is_grad_enabled():
            return self._cache
        rel = self.proj(self.text)
        if self.residual is not None:
            mask = self.residual_mask
            if self.training and self.residual_dropout > 0:
                mask = mask * (torch.rand_like(mask) >= self.residual_dropout)
            rel = rel + self.residual * mask
        table = torch.cat([self.specials, rel], dim=0)
        bias = torch.cat([self.special_bias, self.bias_proj(self.text).squeeze(1)], dim=0)
        self._cache = (table.detach(), bias.detach()) if not torch.is_grad_enabled() else None
        return table, bias

    def train(self, mode: bool = True):
        self._cache = None
        return super().train(mode)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a saved table may hold another relation list than this one: take its sizes
        for name in ("text", "residual_mask", "residual"):
            key = prefix + name
            if (
                key in state_dict
                and getattr(self, name) is not None
                and state_dict[key].shape != getattr(self, name).shape
            ):
                current = getattr(self, name)
                if isinstance(current, nn.Parameter):
                    setattr(self, name, nn.Parameter(torch.zeros_like(state_dict[key])))
                else:
                    self.register_buffer(name, torch.zeros_like(state_dict[key]))
        self._cache = None
        return super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def set_relations(self, text: torch.Tensor, previous: torch.Tensor) -> None:
        """Use a new relation list: ``text`` its features, ``previous[k]`` the old index of new
        relation ``k`` (``-1``: new name, no residual)."""
        known = previous >= 0
        device = self.text.device
        if self.residual is not None:
            residual = torch.zeros(text.shape[0], self.residual.shape[1], device=device)
            residual[known] = self.residual.data[previous[known]]
            self.residual = nn.Parameter(residual, requires_grad=self.residual.requires_grad)
        mask = torch.zeros(text.shape[0], 1, device=device)
        mask[known] = self.residual_mask[previous[known]]
        self.register_buffer("text", text.float().to(device))
        self.register_buffer("residual_mask", mask)
        self._cache = None


class _TableView(nn.Module):
    """A view of the shared table; the table itself is registered once, on the decoder, so its
    parameters and buffers appear once in the state dict and move with the model."""

    table: OpenRelationTable  # set with object.__setattr__: a plain attribute, not a submodule

    def __init__(self, table: OpenRelationTable) -> None:
        super().__init__()
        object.__setattr__(self, "table", table)  # a reference, not a submodule


class OpenEmbedding(_TableView):
    """The decoder's input embedding, read from the shared table."""

    @property
    def weight(self) -> torch.Tensor:  # what code that inspects embeddings expects
        return self.table.weights()[0]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.table.weights()[0])


class OpenLMHead(_TableView):
    """The decoder's output layer: scores against the shared table (+ a text-derived bias)."""

    @property
    def weight(self) -> torch.Tensor:
        return self.table.weights()[0]

    @property
    def bias(self) -> torch.Tensor:
        return self.table.weights()[1]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        table, bias = self.table.weights()
        return F.linear(hidden, table, bias)


def install(model, table: OpenRelationTable) -> OpenRelationTable:
    """Put ``table`` behind the input embedding and output layer of an ``EncoderDecoderModel``'s
    ``BertLMHeadModel`` decoder (after transformers has built and tied the standard ones)."""
    decoder = model.decoder
    decoder.relation_table = table  # one owner in the module tree; the two views hold references
    decoder.bert.embeddings.word_embeddings = OpenEmbedding(table)
    decoder.cls.predictions.decoder = OpenLMHead(table)
    decoder.cls.predictions.bias = None  # the table's bias replaces the per-token one
    for cfg in (decoder.config, model.config, getattr(model.config, "decoder", None)):
        if cfg is not None:
            cfg.tie_word_embeddings = False  # the sharing is the table's, not transformers'
    for m in (model, decoder):  # nothing left for transformers to tie
        m._tied_weights_keys = None
        if hasattr(m, "all_tied_weights_keys"):
            m.all_tied_weights_keys = {}
    return table


# ---------------------------------------------------------------------- T5
class OpenT5Embedding(nn.Module):
    """T5's shared embedding: word ids ``< base`` from the model's own rows, relation ids from the table."""

    words: nn.Embedding
    table: OpenRelationTable  # set with object.__setattr__: a plain attribute, not a submodule

    def __init__(self, words: nn.Embedding, table: OpenRelationTable) -> None:
        super().__init__()
        self.words = words
        object.__setattr__(self, "table", table)  # a reference; the decoder owns the table

    @property
    def base(self) -> int:
        return int(self.words.num_embeddings)

    @property
    def weight(self) -> torch.Tensor:  # what code that inspects embeddings expects
        return torch.cat([self.words.weight, self.table.weights()[0]], dim=0)

    @property
    def num_embeddings(self) -> int:
        return self.base + self.table.num_relations

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        is_rel = ids >= self.base
        out = self.words(torch.where(is_rel, torch.zeros_like(ids), ids))
        if bool(is_rel.any()):
            rel = F.embedding((ids - self.base).clamp_min(0), self.table.weights()[0])
            out = torch.where(is_rel.unsqueeze(-1), rel.to(out.dtype), out)
        return out


class OpenT5LMHead(nn.Module):
    """T5's output layer: word logits from the word rows (tied to the embedding, or its own),
    relation logits against the table (+ a text-derived bias)."""

    embedding: OpenT5Embedding  # set with object.__setattr__: a plain attribute, not a submodule
    words: nn.Linear | None

    def __init__(self, embedding: OpenT5Embedding, words: nn.Linear | None) -> None:
        super().__init__()
        object.__setattr__(self, "embedding", embedding)
        self.words = words  # None: tied to the embedding's word rows

    def _word_weight(self) -> torch.Tensor:
        return self.embedding.words.weight if self.words is None else self.words.weight

    @property
    def weight(self) -> torch.Tensor:
        return torch.cat([self._word_weight(), self.embedding.table.weights()[0]], dim=0)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        table, bias = self.embedding.table.weights()
        return torch.cat([F.linear(hidden, self._word_weight()), F.linear(hidden, table, bias)], dim=-1)


def install_t5(model, table: OpenRelationTable, base: int) -> OpenRelationTable:
    """Put ``table`` behind the relation ids (``base + k``) of a ``T5ForConditionalGeneration``'s
    shared embedding and output layer; the first ``base`` (word) rows are kept as they are."""
    old_in, old_out = model.shared, model.lm_head
    tied = old_out.weight.data_ptr() == old_in.weight.data_ptr()
    words = nn.Embedding(base, old_in.weight.shape[1])
    with torch.no_grad():
        words.weight.copy_(old_in.weight[:base])
    head_words = None
    if not tied:
        head_words = nn.Linear(old_out.weight.shape[1], base, bias=False)
        with torch.no_grad():
            head_words.weight.copy_(old_out.weight[:base])
    model.decoder.relation_table = table  # one owner in the module tree
    emb = OpenT5Embedding(words, table)
    model.shared = emb
    for stack in (model.encoder, model.decoder):  # references: the weights appear once, under shared.*
        stack._modules.pop("embed_tokens", None)
        object.__setattr__(stack, "embed_tokens", emb)
    model.lm_head = OpenT5LMHead(emb, head_words)
    model.config.vocab_size = base + table.num_relations
    model._tied_weights_keys = None  # the sharing is explicit: nothing left for transformers to tie
    if hasattr(model, "all_tied_weights_keys"):
        model.all_tied_weights_keys = {}
    return table
