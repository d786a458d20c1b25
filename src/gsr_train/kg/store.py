"""The whole-KG store: a user's knowledge graph as memory-mapped columns and adjacency both ways.

Where the KG index (`gsr_train.kg.index`) holds one small graph per question, the store holds
one graph for everything: every triple once, so a question's graph can be cut from it
(`gsr_train.kg.extract`). ``gsr-train import-kg`` writes it (`gsr_train.kg.store_build`);
`open_store` opens it in well under a second whatever its size: every array is a memory map
(pages shared by the processes that open it, DDP ranks included), the vocabularies keep their
lookup tables on disk.

Folder layout (raw little-endian arrays; dtypes and shapes in ``meta.json``):

    meta.json                       format, version, key, counts, sources, bad lines, files
    {entities,relations,names}.{offsets,data,table,hashes}.bin   string vocabularies
    heads.bin rels.bin tails.bin    int32 per triple, in file order
    out_ptr.bin out_edge.bin        int64 [entities + 1] / int32 [triples]: edges by head
    in_ptr.bin in_edge.bin          the same by tail
    label.bin                       int32 [entities]: each entity's label (a ``names`` id), -1: none
    name_entity.bin name_ptr.bin    entities of each name (label or alias), by name id

An entity without a label is a mediator (Freebase's CVT nodes, RoG's ``m.`` ids, RDF blank
nodes): it joins facts and is named by its id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gsr_train.arrays import open_array
from gsr_train.data.errors import UserError
from gsr_train.kg.vocab import StringVocab

STORE_FORMAT = "gsr-train-kg-store"
STORE_VERSION = 1
META_FILE = "meta.json"
VOCABS = ("entities", "relations", "names")


class KGStoreError(UserError, ValueError):
    """A KG store that cannot be used: missing, damaged, or built by another version."""


@dataclass
class KGStore:
    """An opened store (see the module docstring); every array memory-mapped."""

    folder: Path
    meta: dict[str, Any]
    entities: StringVocab
    relations: StringVocab
    names: StringVocab
    heads: np.ndarray
    rels: np.ndarray
    tails: np.ndarray
    out_ptr: np.ndarray
    out_edge: np.ndarray
    in_ptr: np.ndarray
    in_edge: np.ndarray
    label: np.ndarray
    name_ptr: np.ndarray
    name_entity: np.ndarray

    @property
    def key(self) -> str:
        return str(self.meta["key"])

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_triples(self) -> int:
        return int(self.heads.size)

    def degree(self, ids: np.ndarray) -> np.ndarray:
        """Edges in and out of each entity of ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        return (self.out_ptr[ids + 1] - self.out_ptr[ids]) + (self.in_ptr[ids + 1] - self.in_ptr[ids])

    def display_names(self, ids: np.ndarray) -> Any:
        """Each entity's label, or its id where it has none (an Arrow string array)."""
        ids = np.asarray(ids, dtype=np.int64)
        label = np.asarray(self.label[ids], dtype=np.int64)
        has = label >= 0
        own = self.entities.to_arrow().take(pa.array(ids))
        if not has.any():
            return own
        named = self.names.to_arrow().take(pa.array(np.where(has, label, 0)))
        return pc.if_else(pa.array(has), named, own)

    def triples(self, edges: np.ndarray) -> list[tuple[str, str, str]]:
        """The triples of edge ids ``edges`` as (head, relation, tail), entities by display name."""
        edges = np.asarray(edges, dtype=np.int64)
        heads = self.display_names(np.asarray(self.heads[edges], dtype=np.int64)).to_pylist()
        tails = self.display_names(np.asarray(self.tails[edges], dtype=np.int64)).to_pylist()
        relations = self.relations.take(np.asarray(self.rels[edges], dtype=np.int64))
        return list(zip(heads, relations, tails))

    def entities_named(self, name: str) -> np.ndarray:
        """Entities whose id, label or alias is ``name`` (ids first; the rest by degree, highest first)."""
        found = self.entities.get(name)
        ids = [found] if found is not None else []
        n = self.names.get(name)
        if n is not None:
            named = np.asarray(self.name_entity[self.name_ptr[n] : self.name_ptr[n + 1]], dtype=np.int64)
            named = named[np.lexsort((named, -self.degree(named)))]
            ids += [int(e) for e in named if int(e) not in ids]
        return np.asarray(ids, dtype=np.int64)


def _vocab(folder: Path, name: str, counts: dict) -> StringVocab:
    n, size, table = counts[f"{name}.offsets"][0] - 1, counts[f"{name}.data"][0], counts[f"{name}.table"][0]
    return StringVocab(
        open_array(folder / f"{name}.offsets.bin", np.int64, (n + 1,)),
        open_array(folder / f"{name}.data.bin", np.uint8, (size,)),
        open_array(folder / f"{name}.table.bin", np.int32, (table,)),
        open_array(folder / f"{name}.hashes.bin", np.uint64, (n,)),
    )


def read_meta(folder: str | Path) -> dict[str, Any]:
    """The store's ``meta.json``, checked to be a store of this version (one line otherwise)."""
    folder = Path(folder)
    path = folder / META_FILE
    if not folder.is_dir():
        raise KGStoreError(f"{folder}: no such KG store (make one with gsr-train import-kg FILE --out {folder})")
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise KGStoreError(f"{folder}: not a finished KG store ({path.name}: {e}); import it again") from None
    if meta.get("format") != STORE_FORMAT:
        raise KGStoreError(f"{folder}: not a KG store (its {META_FILE} has no format {STORE_FORMAT!r})")
    if meta.get("version") != STORE_VERSION:
        raise KGStoreError(
            f"{folder}: a KG store of version {meta.get('version')}, built by another gsr-train; this one "
            f"reads version {STORE_VERSION}: import the KG again (gsr-train import-kg ... --out {folder})"
        )
    return meta


def open_store(folder: str | Path) -> KGStore:
    """Open the store in ``folder`` (memory maps; sizes checked against ``meta.json``)."""
    folder = Path(folder)
    meta = read_meta(folder)
    shapes = {name: tuple(info["shape"]) for name, info in meta["files"].items()}
    dtypes = {name: info["dtype"] for name, info in meta["files"].items()}
    try:
        arrays = {
            name: open_array(folder / f"{name}.bin", dtypes[name], shapes[name]) for name in shapes if "." not in name
        }
        vocabs = {name: _vocab(folder, name, shapes) for name in VOCABS}
    except (OSError, ValueError) as e:
        raise KGStoreError(f"{folder}: damaged KG store ({e}); import it again") from None
    return KGStore(folder, meta, **vocabs, **arrays)  # type: ignore[arg-type]
