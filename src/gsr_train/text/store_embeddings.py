"""The whole-KG store's names embedded: every entity (its label, else its id; mediators get none) and
every relation, once through the embedding cache, plus a vector index of each (`.vector_index`)
for the nearest entities and relations of the whole KG."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gsr_train.config import default_cache_dir
from gsr_train.data.errors import PreflightError
from gsr_train.kg.index import names_have_text
from gsr_train.kg.store import KGStore
from gsr_train.text.embeddings import STORAGE_DTYPES, EmbeddingTable, KGEmbeddings, relation_texts
from gsr_train.text.encoders import TextEncoder
from gsr_train.text.vector_index import VectorIndex, VectorIndexOptions


def _tables(store: KGStore, encoder: TextEncoder, encoder_cfg: dict, cache_dir: Path):
    dtype = str(encoder_cfg.get("dtype") or "float32")
    if dtype not in STORAGE_DTYPES:
        raise PreflightError(f"encoder.dtype={dtype!r}: use one of {sorted(STORAGE_DTYPES)}")
    names: Any = (
        store.entities
        if not (np.asarray(store.label) >= 0).any()
        else store.display_names(np.arange(store.num_entities)).to_pylist()
    )
    has = names_have_text(names)
    relation_text = str(encoder_cfg.get("relation_text") or "raw")
    entity = EmbeddingTable(names, encoder, cache_dir, "entity", has, dtype)
    relation = EmbeddingTable(
        relation_texts(store.relations, relation_text), encoder, cache_dir, f"relation:{relation_text}", dtype=dtype
    )
    return entity, relation, has


def store_embeddings(store: KGStore, encoder: TextEncoder, encoder_cfg: dict, cache_dir: Path) -> KGEmbeddings:
    """The store's entity and relation names embedded once through the cache (memory-mapped after that)."""
    entity, relation, has = _tables(store, encoder, encoder_cfg, cache_dir)
    has_text = torch.from_numpy(np.asarray(has, dtype=bool).copy())
    return KGEmbeddings(entity.get(), has_text, relation.get(), {}, encoder.dim, encoder.name)


@dataclass
class StoreVectors:
    """The store's embeddings and a vector index of its named entities and of its relations."""

    store: KGStore
    emb: KGEmbeddings
    entities: VectorIndex
    relations: VectorIndex

    @classmethod
    def build(
        cls,
        store: KGStore,
        encoder: TextEncoder,
        cache_dir: str | Path | None = None,
        encoder_cfg: dict | None = None,
        options: VectorIndexOptions | None = None,
    ) -> StoreVectors:
        """Embeds (once) and indexes (once; both kept beside the embedding tables in the cache, by
        default the project's); ``encoder_cfg``: the run's ``encoder`` block (``dtype``, ``relation_text``)."""
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        entity, relation, has = _tables(store, encoder, encoder_cfg or {}, cache)
        emb = KGEmbeddings(
            entity.get(),
            torch.from_numpy(np.asarray(has, dtype=bool).copy()),
            relation.get(),
            {},
            encoder.dim,
            encoder.name,
        )
        named = np.flatnonzero(np.asarray(has, dtype=bool))
        return cls(
            store,
            emb,
            VectorIndex(emb.entity, named, options, entity.folder),
            VectorIndex(emb.relation, None, options, relation.folder),
        )
