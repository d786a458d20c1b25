"""Export a trained model (run folder, checkpoint or model folder) to a Hub-ready folder + model card.

One exporter per model kind (``EXPORTERS``; a new kind is one more entry), each with
``detect(path)`` and ``export(path, folder) -> info``:

* ``subgraphrag``: Lightning ``.ckpt`` -> `SubgraphRAGScorer` ``config.json`` +
  ``model.safetensors`` (``SubgraphRAGScorer.from_pretrained``);
* ``gsr``: ``GSRModel.save_pretrained`` folder (model, tokenizer with the relation tokens,
  ``relations.txt``, ``gsr_config.json``; ``GSRModel.from_pretrained``);
* ``reader``: the peft adapter folder as saved by the reader run (``adapter_config.json``,
  ``adapter_model.safetensors``, tokenizer, ``reader.json``; ``AutoPeftModelForCausalLM``).

Every export also gets ``README.md`` (model card: data, config, metrics, how to load) and
``gsr_train_export.json`` (kind, source, metrics). The folder is built under a temporary
name and renamed into place, so an interrupted export never leaves a half folder.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from gsr_train.config import as_dict
from gsr_train.eval.tail import in_run
from gsr_train.export.card import build_card
from gsr_train.export.hub_scorer import SubgraphRAGScorer
from gsr_train.io import atomic_dir, write_json
from gsr_train.models.gsr.modeling import load_gsr
from gsr_train.plugins import Registry
from gsr_train.retrievers.subgraphrag import load_scorer

log = logging.getLogger(__name__)

EXPORT_INFO = "gsr_train_export.json"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def _floats(d: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}{k}": round(float(v), 4)
        for k, v in d.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
    }


def _run_config(run: Path) -> dict:
    """The run's composed Hydra config without machine-specific parts (paths, hydra)."""
    path = run / ".hydra" / "config.yaml"
    if not path.exists():
        return {}

    cfg = as_dict(OmegaConf.load(path), resolve=False)
    for key in ("paths", "hydra"):
        cfg.pop(key, None)
    return cfg


# ---------------------------------------------------------------------- SubgraphRAG
def _is_subgraphrag_ckpt(path: Path) -> bool:
    if path.suffix != ".ckpt" or not path.is_file():
        return False

    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    hp = ckpt.get("hyper_parameters") or {}
    return "gsr" not in ckpt and "dim" in hp and "model" in hp


def _subgraphrag_ckpt(src: Path) -> tuple[Path, dict]:
    if src.is_file():
        return src, {}
    results = _read_json(src / "metrics.json") if (src / "metrics.json").exists() else {}
    best = in_run(src, results.get("checkpoint"))
    if best is not None and best.is_file():
        return best, results
    ckpts = sorted((src / "checkpoints").glob("best-*.ckpt")) or sorted((src / "checkpoints").glob("last.ckpt"))
    if not ckpts:
        raise FileNotFoundError(f"{src}: no checkpoints/best-*.ckpt or last.ckpt to export")
    return ckpts[-1], results


def detect_subgraphrag(src: Path) -> bool:
    if src.is_dir():
        r = src / "metrics.json"
        if r.exists() and isinstance(_read_json(r).get("model"), dict) and _read_json(r)["model"].get("scorer"):
            return True
        return any(_is_subgraphrag_ckpt(p) for p in sorted((src / "checkpoints").glob("*.ckpt"))[:1])
    return _is_subgraphrag_ckpt(src)


def export_subgraphrag(src: Path, folder: Path) -> dict:

    ckpt, results = _subgraphrag_ckpt(src)
    scorer, hparams = load_scorer(ckpt)
    meta = {**(hparams.get("meta") or {}), "dim": int(hparams["dim"])}
    SubgraphRAGScorer.from_scorer(scorer, meta).save_pretrained(folder)
    name = (results.get("model") or {}).get("name") or "subgraphrag"
    metrics: dict[str, float] = {}
    if results:
        metrics.update(
            _floats(
                {k: v for k, v in (results.get("at_k") or {}).items() if k != "k"}, f"{results.get('split', 'test')}/"
            )
        )
        if metrics and results.get("at_k"):
            metrics = {f"{k}@{results['at_k']['k']}": v for k, v in metrics.items()}
        overall = ((results.get("metrics") or {}).get(name) or {}).get("overall") or {}
        for m, per_k in overall.items():
            metrics.update(_floats(per_k, f"{results.get('split', 'test')}/{m}@"))
    config = {
        "scorer": scorer.config.to_dict(),
        "train": (results.get("model") or {}).get("train"),
        "optim": hparams.get("optim"),
        "loss": hparams.get("loss"),
    }
    return {
        "kind": "subgraphrag",
        "name": name,
        "data": meta.get("data") or results.get("data"),
        "split": results.get("split", "test"),
        "encoder": meta.get("encoder_name"),
        "config": config,
        "metrics": metrics,
        "source": str(ckpt),
        "data_note": f"- text encoder (frozen; use the same one at inference): `{meta.get('encoder_name')}`, "
        f"{meta.get('dim')}-d\n- entity vocabulary hash: `{meta.get('entity_vocab_hash')}`"
        f"\n- training data fingerprint (KG index key): `{meta.get('index_key')}`",
    }


# ---------------------------------------------------------------------- GSR
def _gsr_model_path(src: Path) -> Path:
    if src.is_dir() and (src / "gsr_config.json").exists():
        return src
    if src.is_dir() and (src / "model" / "gsr_config.json").exists():
        return src / "model"
    if src.suffix == ".ckpt":
        return src
    raise FileNotFoundError(f"{src}: no GSR model folder (gsr_config.json) or .ckpt")


def detect_gsr(src: Path) -> bool:
    if src.is_dir():
        return (src / "gsr_config.json").exists() or (src / "model" / "gsr_config.json").exists()
    if src.suffix == ".ckpt" and src.is_file():
        return "gsr" in torch.load(src, map_location="cpu", weights_only=False)
    return False


def export_gsr(src: Path, folder: Path) -> dict:

    model_path = _gsr_model_path(src)
    gsr = load_gsr(model_path)
    gsr.save_pretrained(folder)
    run = (
        src
        if src.is_dir() and (src / "metrics.json").exists()
        else (src.parent if (src.parent / "metrics.json").exists() else None)
    )
    fig = _read_json(run / "metrics.json") if run else {}
    metrics: dict[str, float] = {}
    for mode in ("unconstrained", "constrained"):
        r = fig.get(mode) or {}
        metrics.update(_floats(r.get("chain_match") or {}, f"{mode}/"))
        metrics.update(_floats(r.get("answer_coverage") or {}, f"{mode}/coverage_"))
    family = gsr.spec.get("family")
    config: dict[str, Any] = {
        "spec": gsr.spec,
        "num_relations": len(gsr.relations),
        "variant": fig.get("variant"),
        "schedule": fig.get("schedule"),
        **({"run": _run_config(run)} if run else {}),
    }
    data = ((config.get("run") or {}).get("data") or {}).get("name")
    return {
        "kind": "gsr",
        "name": gsr.spec.get("name") or "gsr",
        "data": data,
        "config": config,
        "metrics": metrics,
        "source": str(model_path),
        "base_model": gsr.spec.get("pretrained"),
        "auto_class": "transformers.EncoderDecoderModel"
        if family == "minilm"
        else "transformers.T5ForConditionalGeneration",
        "data_note": f"- {len(gsr.relations)} relation tokens (`relations.txt`, one added token each)",
    }


# ---------------------------------------------------------------------- readers (peft adapters)
def _adapter_path(src: Path) -> Path:
    for cand in (src, src / "adapter"):
        if (cand / "adapter_config.json").exists():
            return cand
    raise FileNotFoundError(f"{src}: no peft adapter folder (adapter_config.json)")


def detect_reader(src: Path) -> bool:
    return src.is_dir() and any((c / "adapter_config.json").exists() for c in (src, src / "adapter"))


def export_reader(src: Path, folder: Path) -> dict:
    adapter = _adapter_path(src)
    for p in sorted(adapter.iterdir()):
        if p.is_file() and p.name != "README.md":
            shutil.copy2(p, folder / p.name)
    acfg = _read_json(adapter / "adapter_config.json")
    meta = _read_json(adapter / "reader.json") if (adapter / "reader.json").exists() else {}
    run = adapter.parent if (adapter.parent / "metrics.json").exists() else None
    fig = _read_json(run / "metrics.json") if run else {}
    metrics: dict[str, float] = {}
    for variant, summary in (fig.get("metrics") or {}).items():
        view = (summary or {}).get("all") or {}
        metrics.update(_floats(view.get("metrics") or {}, f"{variant}/"))
    base = meta.get("base_model") or acfg.get("base_model_name_or_path")
    return {
        "kind": "reader",
        "name": (fig.get("reader") or {}).get("name") or "reader",
        "data": ((_run_config(run).get("data") or {}).get("name") if run else None),
        "config": {"adapter": acfg, "reader": meta, "qa": fig.get("qa")},
        "metrics": metrics,
        "source": str(adapter),
        "base_model": base,
        "data_note": f"- evidence per prompt: K = {meta.get('k', fig.get('k'))}, format `{meta.get('format')}`",
    }


@dataclass
class Exporter:
    detect: Callable[[Path], bool]
    export: Callable[[Path, Path], dict]


# order matters: the first exporter that recognises a path wins
EXPORTERS: Registry[Exporter] = Registry("model kind", error=ValueError)
EXPORTERS.register("gsr")(Exporter(detect_gsr, export_gsr))
EXPORTERS.register("reader")(Exporter(detect_reader, export_reader))
EXPORTERS.register("subgraphrag")(Exporter(detect_subgraphrag, export_subgraphrag))


def detect_kind(src: str | Path) -> str:
    src = Path(src)
    if not src.exists():
        raise FileNotFoundError(f"nothing to export at {src}")
    for kind, ex in EXPORTERS.items():
        if ex.detect(src):
            return kind
    raise ValueError(
        f"{src}: not a SubgraphRAG / GSR / reader run folder, checkpoint or model folder "
        f"(looked for metrics.json with a scorer, checkpoints/*.ckpt, model/gsr_config.json, "
        f"adapter/adapter_config.json)"
    )


def export_model(src: str | Path, out: str | Path, kind: str | None = None, repo_id: str | None = None) -> dict:
    """Export ``src`` to the folder ``out`` (replaced atomically); returns the export info.

    ``repo_id``: what the card's loading snippet names (default: the folder path).
    """
    src, out = Path(src), Path(out)
    kind = kind or detect_kind(src)
    exporter = EXPORTERS.resolve(kind)
    with atomic_dir(out) as tmp:
        info = exporter.export(src, tmp)
        info["files"] = sorted([p.name for p in tmp.iterdir() if p.is_file()] + ["README.md", EXPORT_INFO])
        info["files"] = sorted(set(info["files"]))
        card = build_card(info, where=repo_id or str(out))
        card.save(str(tmp / "README.md"))
        write_json(tmp / EXPORT_INFO, {k: v for k, v in info.items() if k != "config"})
        tmp.chmod(0o755)  # mkdtemp makes 0700 folders; an export is meant to be shared
        for p in tmp.iterdir():
            if p.is_file():
                p.chmod(0o644)
    log.info("exported %s (%s) to %s", src, kind, out)
    return info
