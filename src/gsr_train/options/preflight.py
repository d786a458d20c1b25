"""The checks of a run's options and inputs that need more than the option classes: files that must
exist, splits the data must have, an encoder that must load, one value for one thing, the options a
runner reads its own way. Each runner calls its check first, before the index, embeddings or
training; every problem is a `PreflightError` (one line, or one list of every problem)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gsr_train.config import as_dict, defaults_of, plain
from gsr_train.data.errors import PreflightError, UserError
from gsr_train.datamodules import gsr_prepare
from gsr_train.kg.sparql_options import SparqlOptions, is_endpoint
from gsr_train.kg.store import KGStoreError, read_meta
from gsr_train.models.gsr.modeling import resolve_pretrained
from gsr_train.models.subgraphrag.options import SubgraphRAGTrain
from gsr_train.models.subgraphrag.scorer import ScorerConfig
from gsr_train.openended.forms import check_forms
from gsr_train.openended.stages import CRITERIA
from gsr_train.options.check import built
from gsr_train.options.inputs import refuse, resume_problems, split_problems
from gsr_train.options.recipes import GSRWalks, SubgraphRAGRun
from gsr_train.robustness.perturb import METHODS
from gsr_train.runtime.run_data import encoder_options, label_path
from gsr_train.text.encoders import load_encoder

GSR_FAMILIES = ("t5", "minilm")  # model.family of the GSR models (conf/model/gsr_*.yaml)


def _kg_problems(cfg: DictConfig) -> list[str]:
    """``data.kg``: a store of this version, or a SPARQL endpoint that answers."""
    kg = OmegaConf.select(cfg, "data.kg", default=None)
    if not kg:
        return []
    if not is_endpoint(kg):
        try:
            read_meta(str(kg))
        except KGStoreError as e:
            return [f"data.kg: {e}"]
        return []
    from gsr_train.kg.sparql import SparqlError, probe  # httpx: loaded only for an endpoint

    try:
        probe(str(kg), SparqlOptions(**as_dict(OmegaConf.select(cfg, "data.sparql", default=None) or {})))
    except (SparqlError, TypeError) as e:
        return [f"data.kg: {e}"]
    return []


def preflight(
    cfg: DictConfig,
    splits: Sequence[str] = (),
    label_splits: Sequence[str] = (),
    checkpoints: dict[str, Any] | None = None,
    encoder: bool = False,
) -> None:
    """Check every input the run will need, before the index, embeddings or training.

    ``splits``: splits the run reads (each must be in ``data.splits`` and, for a local
    folder, have its file(s)); ``label_splits``: splits whose ``data.labels`` file must exist
    when one is configured; ``checkpoints``: ``{option name: path}`` that must be files
    (``auto`` and empty values are skipped); ``encoder``: the run's encoder must load.
    All problems are reported at once, each naming the option to fix.
    """
    problems = [*split_problems(cfg, splits), *_file_problems(cfg, label_splits, checkpoints or {})]
    problems += [*_kg_problems(cfg), *resume_problems(cfg)]
    if encoder:
        try:
            load_encoder(encoder_options(cfg))
        except Exception as e:  # unknown name or option, model folder missing, hub offline
            problems.append(f"encoder: {e}")
    refuse(problems)


def _file_problems(cfg: DictConfig, label_splits: Sequence[str], checkpoints: Mapping[str, Any]) -> Iterator[str]:
    """Label files and checkpoints the options name that do not exist."""
    for split in label_splits:
        path = label_path(cfg, split)
        if path and not Path(path).is_file():
            yield f"data.labels.{split}={path} does not exist"
    for option, path in checkpoints.items():
        if option != "resume" and path and str(path) != "auto" and not Path(str(path)).exists():
            yield f"{option}={path} does not exist"


def one_setting(cfg: DictConfig, used: str, other: str = "trainer.max_epochs") -> None:
    """``other`` must equal ``used`` (the runner reads ``used``): two different values for one
    thing (epochs) are the user's mistake, reported instead of one silently winning."""
    a, b = OmegaConf.select(cfg, used, default=None), OmegaConf.select(cfg, other, default=None)
    if a is not None and b is not None and a != b:
        raise PreflightError(
            f"two settings for one thing: {other}={b} and {used}={a}; this experiment reads {used}, set that one"
        )


def require_family(cfg: DictConfig, families: Sequence[str], runner: str) -> None:
    """``cfg.model`` must be a model of one of ``families`` (``model=gsr_tiny`` on SubgraphRAG is an error)."""
    family = OmegaConf.select(cfg, "model.family", default=None)
    if family not in families:
        name = OmegaConf.select(cfg, "model.name", default="?")
        raise PreflightError(
            f"model={name} is a {family or 'unknown'} model; the {runner} runner needs a "
            f"{' / '.join(families)} model (model=...)"
        )


def check_retriever(cfg: DictConfig, trained: bool) -> None:
    """``+experiment=retrieve``'s inputs: the splits it fits on (a ``trained`` retriever with nothing
    in ``eval_only`` to score) and scores, their labels, the checkpoint, the encoder; an untrained
    retriever given a checkpoint is one line."""
    split, eval_only = str(cfg.split), cfg.get("eval_only")
    if eval_only and not trained:
        spec = cfg.retriever
        raise PreflightError(f"eval_only={eval_only}: retriever {spec.get('_target_') or spec.name} is not trained")
    fit = (
        []
        if eval_only or not trained
        else [str(cfg.train_split), *([str(cfg.val_split)] if cfg.get("val_split") else [])]
    )
    checkpoints = {"eval_only": eval_only} if trained else None
    preflight(cfg, splits=[*fit, split], label_splits=[split], checkpoints=checkpoints, encoder=True)


# ---------------------------------------------------------------------- SubgraphRAG
SUBGRAPHRAG_DEFAULTS = defaults_of(SubgraphRAGRun)  # the runner's options a config leaves out
SUBGRAPHRAG_TRAIN_DEFAULTS: dict[str, Any] = defaults_of(SubgraphRAGTrain)


def subgraphrag_settings(cfg: DictConfig) -> tuple[dict, dict, dict]:
    """``(run settings, model options, training recipe)`` of a SubgraphRAG run, defaults filled in."""
    given = plain(cfg.get("subgraphrag")) or {}
    if given.get("ckpt_path"):
        raise PreflightError(
            "subgraphrag.ckpt_path is gone: resume a run in its own folder with "
            "hydra.run.dir=<run folder> resume=auto (the best checkpoint then covers the whole run)"
        )
    run = {**SUBGRAPHRAG_DEFAULTS, **{k: v for k, v in given.items() if k != "ckpt_path"}}
    model = dict(plain(cfg.get("model")) or {})
    train = {**SUBGRAPHRAG_TRAIN_DEFAULTS, **(model.pop("train", None) or {})}
    train["optim"] = {**SUBGRAPHRAG_TRAIN_DEFAULTS["optim"], **(train.get("optim") or {})}
    train["loss"] = {**SUBGRAPHRAG_TRAIN_DEFAULTS["loss"], **(train.get("loss") or {})}
    return run, model, train


def check_subgraphrag(cfg: DictConfig) -> tuple[dict, dict, dict]:
    """Every option and input a SubgraphRAG run needs; its `subgraphrag_settings`."""
    run_cfg, model_opts, train = subgraphrag_settings(cfg)
    require_family(cfg, ["subgraphrag"], "subgraphrag")
    one_setting(cfg, "model.train.epochs")
    try:
        ScorerConfig.from_options(model_opts, 1)  # unknown or invalid model options
    except ValueError as e:
        raise PreflightError(f"model={model_opts.get('name')}: {e}") from None
    preflight(
        cfg,
        splits=[run_cfg["train_split"], run_cfg["val_split"], run_cfg["eval_split"]],
        label_splits=[run_cfg["eval_split"]],
        checkpoints={"subgraphrag.eval_only": run_cfg["eval_only"]},
        encoder=True,
    )
    return run_cfg, model_opts, train


# ---------------------------------------------------------------------- GSR
def gsr_walks(cfg: DictConfig) -> GSRWalks:
    """``gsr.walks`` through its recipe (`gsr_train.options.recipes.GSRWalks`: one place for defaults)."""
    return built(GSRWalks, cfg.gsr.get("walks"))


def check_gsr(cfg: DictConfig, model_option: str = "gsr.eval_only", label_splits: Sequence[str] = ()) -> None:
    """Every option and input a GSR run needs, before any data work (``model_option``: the option
    that names a trained model, ``label_splits``: splits whose labelled triples are scored)."""
    g = cfg.gsr
    require_family(cfg, GSR_FAMILIES, "gsr")
    one_setting(cfg, "model.epochs")
    if g.get("require_gpu") and not _cuda_visible():
        raise PreflightError(
            f"gsr.require_gpu: {cfg.get('experiment_name') or 'this recipe'} is sized for a GPU "
            f"({int(cfg.model.epochs)} epochs of {cfg.model.name}) and no CUDA device is visible here; "
            "add trainer=cpu gsr.require_gpu=false to run it on the CPU anyway"
        )
    problems = gsr_prepare.option_problems(plain(g) or {}, gsr_walks(cfg))
    if problems:
        raise PreflightError("; ".join(problems))
    needed = [g.eval_split] + ([] if g.get("eval_only") else ["train"])
    preflight(
        cfg,
        splits=needed if cfg.data.get("format") != "paths" else [],
        label_splits=label_splits,
        checkpoints={model_option: g.get("eval_only")},
    )
    if cfg.model.get("pretrained") and not g.get("eval_only"):
        resolve_pretrained(cfg.model.pretrained)  # fail before any data work when the hub is unreachable


def _cuda_visible() -> bool:
    import torch  # lazy: the option checks import without torch

    return bool(torch.cuda.is_available())


# ---------------------------------------------------------------------- open-ended (OKGQA)
class OpenEndedOptionError(UserError, ValueError):
    """An ``open_ended`` option that names something that does not exist."""


def check_open_ended(cfg: DictConfig, forms: list[str]) -> dict[str, str]:
    """The user's mistakes in ``open_ended``, one message before any work; the results files by label."""
    oe = cfg.open_ended
    results = as_dict(oe.results) if oe.get("results") else {}
    try:
        check_forms(forms, results)
    except ValueError as e:
        raise OpenEndedOptionError(str(e)) from None
    if sorted(set(oe.verifiers) - {"encoder", "llm"}) or not oe.verifiers:
        raise OpenEndedOptionError(f"open_ended.verifiers={list(oe.verifiers)}: name encoder and/or llm")
    bad = sorted(set(oe.geval.criteria) - set(CRITERIA))
    if bad:
        raise OpenEndedOptionError(f"open_ended.geval.criteria: unknown {bad} (known: {', '.join(CRITERIA)})")
    if oe.knowledge not in ("graph", "evidence") and not Path(str(oe.knowledge)).is_file():
        raise OpenEndedOptionError(f"open_ended.knowledge={oe.knowledge}: not graph, evidence or an existing text file")
    if str(oe.questions) != "embedded" and not Path(str(oe.questions)).is_file():
        raise OpenEndedOptionError(
            f"open_ended.questions={oe.questions}: no such file (embedded, a .jsonl or OKGQA's .csv)"
        )
    kg = _kg_problems(cfg)
    if kg:
        raise OpenEndedOptionError("; ".join(kg))
    for label, path in results.items():
        if not Path(str(path)).is_file():
            raise OpenEndedOptionError(f"open_ended.results.{label}={path}: no such file")
    return results


def check_perturbations(cfg: DictConfig) -> None:
    """``open_ended.perturb.methods`` must name perturbations that exist."""
    bad = sorted(set(cfg.open_ended.perturb.methods) - set(METHODS))
    if bad:
        raise OpenEndedOptionError(f"open_ended.perturb.methods: unknown {bad} (known: {', '.join(METHODS)})")
