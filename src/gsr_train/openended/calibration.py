"""Judge calibration: how far to trust a verifier before using it (issue item 6).

A fixed set of true facts (verbalised KG triples) and false ones (the same triples with the
relation swapped or the tail entity replaced, `gsr_train.eval.fact_check.calibration_facts`)
is judged by each verifier against the same knowledge source answers are judged against (the
question's whole graph, through the same lexical first stage). Each verifier gets its AUC, its
accuracy at the threshold that maximises it (the encoder verifier's threshold for the run), its
accuracy at its own cut (the LLM judge: P(True) >= 0.5), the AUC per kind of false fact, and
the two verifiers' agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gsr_train.eval.fact_check import (
    Fact,
    Knowledge,
    agreement,
    calibrate,
    calibration_facts,
    closest_lines,
)
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.openended import stages


def calibration_set(
    split: SplitGraphs, index: KGIndex, per_question: int, max_facts: int | None, seed: int
) -> list[Fact]:
    """True / relation-swapped / entity-replaced facts over the split's graphs (the first ``max_facts``)."""
    facts = calibration_facts(split, index.entities, index.relations, per_question=per_question, seed=seed)
    if not facts:
        raise ValueError("judge calibration: no fact could be made (no triple between two named entities)")
    return facts[:max_facts] if max_facts else facts


def _by_kind(scores: np.ndarray, facts: Sequence[Fact]) -> dict[str, float | None]:
    out = {}
    for kind in sorted({f.kind for f in facts} - {"true"}):
        rows = [i for i, f in enumerate(facts) if f.kind in ("true", kind)]
        out[kind] = calibrate(scores[rows], [facts[i].label for i in rows])["auc"]
    return out


def calibrate_judges(facts: Sequence[Fact], sources: Sequence[Knowledge], judges, opts) -> dict[str, Any]:
    """Each configured verifier's figures on ``facts`` (see the module docstring), ``sources[q]`` the
    knowledge of question ``q``'s graph; the LLM judge's unreadable answers are counted per reason
    and left out of its figures."""
    labels = np.asarray([f.label for f in facts])
    kinds = {k: sum(f.kind == k for f in facts) for k in sorted({f.kind for f in facts})}
    report: dict[str, Any] = {"facts": len(facts), "kinds": kinds}
    enc_verdicts = llm_verdicts = None
    if "encoder" in opts.verifiers and judges.verifier is not None:
        support = judges.verifier.support([f.text for f in facts], [sources[f.question] for f in facts])
        report["encoder"] = {**calibrate(support, labels), "auc_by_kind": _by_kind(support, facts)}
        enc_verdicts = support >= report["encoder"]["threshold"]
    if "llm" in opts.verifiers:
        asks = [
            (f"calibration|{i}", f.text, closest_lines(f.text, sources[f.question], opts.llm_lines))
            for i, f in enumerate(facts)
        ]
        with judges.stage("calibration") as client:
            parsed, counts = stages.verify_llm(client, asks)
        ok = [i for i, p in enumerate(parsed) if p.value is not None]
        p_true = np.asarray([parsed[i].value for i in ok], dtype=np.float64)
        llm: dict[str, Any] = {"counts": {reason: n for (_, reason), n in counts.items()}, "readable": len(ok)}
        if ok:
            llm.update(calibrate(p_true, labels[ok]))
            llm["accuracy_at_0.5"] = float(((p_true >= 0.5) == labels[ok].astype(bool)).mean())
            llm["auc_by_kind"] = _by_kind(p_true, [facts[i] for i in ok])
            llm_verdicts = {i: bool(parsed[i].value >= 0.5) for i in ok}  # type: ignore[operator]
        report["llm"] = llm
    if enc_verdicts is not None and llm_verdicts:
        keys = sorted(llm_verdicts)
        report["agreement"] = agreement([bool(enc_verdicts[i]) for i in keys], [llm_verdicts[i] for i in keys])
    return report


def calibration_table(report: dict[str, Any], model: str) -> str:
    """The calibration as a markdown table (printed with every open-ended run)."""
    kinds = ", ".join(f"{v} {k}" for k, v in report["kinds"].items())
    lines = [
        f"### Judge calibration: {report['facts']} KG facts ({kinds})",
        "",
        "| verifier | facts read | AUC | accuracy (best threshold) | threshold | accuracy at P(True)>=0.5 "
        "| AUC relation swapped | AUC entity replaced |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, label in (("encoder", "encoder (frozen, offline)"), ("llm", f"LLM judge ({model})")):
        r = report.get(name)
        if r is None:
            continue
        by = r.get("auc_by_kind", {})
        lines.append(
            f"| {label} | {r.get('facts', r.get('readable', 0))} | {_f(r.get('auc'))} | {_f(r.get('accuracy'))} "
            f"| {_f(r.get('threshold'))} | {_f(r.get('accuracy_at_0.5'))} | {_f(by.get('relation_swapped'))} "
            f"| {_f(by.get('entity_replaced'))} |"
        )
    if "agreement" in report:
        a = report["agreement"]
        lines += [
            "",
            f"Verifier agreement: {_f(a['agreement'])} of {a['facts']} facts (Cohen's kappa {_f(a['kappa'])}).",
        ]
    return "\n".join(lines)


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"
