"""A GSR run's training data for its model: `gsr_train.datamodules.gsr_prepare.GSRData` and the
model's relation vocabulary -> the retrieval, validation, indexing and walk items of a
`gsr_train.datamodules.gsr_data.GSRDataModule` (``gsr.schedule``, ``gsr.index``, ``gsr.walks``).
The figures of each pool go into the data summary (``metrics.json``'s ``data``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gsr_train.datamodules.gsr_data import (
    ChainQuestion,
    GSRDataModule,
    chain_relations,
    index_items,
    load_index_file,
    pseudo_questions,
    retrieval_items,
    walk_items,
)
from gsr_train.features.relation_tokens import INDEX_PREFIX, RETRIEVAL_PREFIX

if TYPE_CHECKING:
    from gsr_train.datamodules.gsr_data import GSRDataModule, Seq2SeqItem
    from gsr_train.datamodules.gsr_prepare import GSRData, WalkSettings


def build_datamodule(g: Any, seed: int, data: GSRData, gsr, walks: WalkSettings, batch_size: int) -> GSRDataModule:
    """The DataModule of ``gsr`` (its ``relations`` vocabulary) on ``data`` with the run's ``gsr``
    recipe ``g`` (`gsr_train.options.recipes.GSRRun`) and ``seed``: every training question's
    chains as one retrieval item, the validation questions' ground chains, the indexing pool and the
    walk pool; ``batch_size`` is this process's batch."""
    retrieval, counts = retrieval_items(data.train, gsr.relations)
    validation, vcounts = _validation_items(g.max_val_questions, data, gsr.relations)
    index_pool = _index_pool(g.index, seed, data, gsr.relations) if g.schedule != "retrieval" else []
    share = g.index.kg_share
    focus = _index_focus(data, gsr.relations, index_pool) if share is not None and index_pool else None
    walk_pool = _walk_pool(data, gsr.relations, walks)
    data.summary.update(
        {
            "walk_pool": len(walk_pool),
            "retrieval_items": len(retrieval),
            "retrieval_targets": sum(len(i.targets) for i in retrieval),
            "index_pool": len(index_pool),
            "validation_items": len(validation),
            **{f"train_{k}": v for k, v in counts.items()},
            **{f"val_{k}": v for k, v in vcounts.items()},
        }
    )
    return GSRDataModule(
        gsr,
        retrieval,
        index_pool,
        validation,
        schedule=g.schedule,
        index_epochs=g.index_epochs,
        index_ratio=float(g.index_ratio),
        batch_size=batch_size,
        seed=seed,
        max_targets=g.max_targets,
        walk_pool=walk_pool,
        walk_ratio=walks.ratio,
        index_focus=focus,
        focus_share=None if focus is None else float(share),
    )


def _validation_items(first: int | None, data: GSRData, relations) -> tuple[list, dict]:
    """The validation questions with ground chains (the ``first``: ``gsr.max_val_questions``), their
    ground chains as targets."""
    val_q = [q for q in data.validation if q.ground]
    if first:
        val_q = val_q[:first]
    val_q = [ChainQuestion(q.id, q.question, q.ground, q.ground) for q in val_q]
    return retrieval_items(val_q, relations, strict=False, require_targets=False)


def _index_pool(index: Any, seed: int, data: GSRData, relations) -> list:
    """Indexing items: pseudo questions (templates, ``gsr.index.templates`` or the relation's name)
    about the ``gsr.index.relations`` relations of the vocabulary (every one, the KG's, or those
    with subjects); ``index``: ``gsr.index`` (`gsr_train.options.recipes.GSRIndexData`)."""
    sources = load_index_file(index.templates) if index.templates else None
    rels = relations.relations
    if index.relations == "kg":
        kg = set(data.kg_relations)
        rels = [r for r in rels if r in kg]
    elif index.relations == "subjects":
        rels = [r for r in rels if r in data.subjects]
    examples = pseudo_questions(
        rels,
        data.subjects,
        sources,
        per_relation=index.per_relation,
        seed=seed,
        fallback_subject=index.fallback_subject,
    )
    return index_items(examples, relations)


def _index_focus(data: GSRData, relations, index_pool: list) -> list[bool]:
    """``gsr.index.kg_share``: which indexing items are about the KG's (and training chains')
    relations, the items the indexing sample is weighted toward."""
    lookup = relations.lookup
    wanted = {lookup[r] for r in (*data.kg_relations, *chain_relations(data.train)) if r in lookup}
    focus = [it.targets[0][0] in wanted for it in index_pool]
    data.summary["index_focus"] = sum(focus)
    return focus


def _walk_pool(data: GSRData, relations, walks: WalkSettings) -> list[Seq2SeqItem]:
    """The walk examples as items with the ``gsr.walks.prefix`` task prefix (walks through a relation
    outside the vocabulary are dropped and counted)."""
    if not data.walks:
        return []
    prefix = {"retrieval": RETRIEVAL_PREFIX, "index": INDEX_PREFIX}[walks.prefix]
    walk_pool, walk_dropped = walk_items(data.walks, relations, prefix)
    if walk_dropped:
        data.summary["walks_outside_vocab"] = walk_dropped
    return walk_pool
