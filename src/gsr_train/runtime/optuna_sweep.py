"""Hyperparameter search with Optuna (``hydra/sweeper=gsr_optuna``, ``conf/hparams_search/``).

Hydra's Optuna sweeper (hydra-optuna-sweeper) asks a study for trials and launches each as a job
of the multirun. This one differs in two ways:

* the objective is read from the job's ``metrics.json`` (``objective``: a metric of its first
  row, e.g. ``answer_recall@10``), so any runner is searchable without returning a value, and a
  job a resumed sweep finds finished still counts;
* it resumes. The study lives in the sweep folder (``storage: sqlite:///<sweep dir>/optuna.db``,
  loaded when it exists) and trial N runs in job folder N. Rerun with the same command, a killed
  search first reruns the trials it left running, in their own folders (``resume: auto``
  continues them from their ``last.ckpt``), then asks for trials until ``n_trials`` have ended.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides
from omegaconf import OmegaConf
from optuna.trial import TrialState

from gsr_train.data.errors import USER_ERROR_EXIT
from gsr_train.eval.aggregate import OPTUNA_FILE
from gsr_train.eval.tail import METRICS_FILE, MetricsFileError, flat_rows, read_metrics
from gsr_train.io import write_json

log = logging.getLogger(__name__)

RESULTS_FILE = OPTUNA_FILE  # read by the sweep table (gsr_train.eval.aggregate)


class OptunaSweep(OptunaSweeperImpl):
    """`OptunaSweeperImpl` scored from ``metrics.json`` and resumable (see the module)."""

    def __init__(self, objective: str, **options: Any) -> None:
        super().__init__(**options)
        self.objective = objective

    def sweep(self, arguments: list[str]) -> None:
        space, fixed = self._space(arguments)
        for name in fixed:
            space.pop(name, None)
        Path(self.sweep_dir).mkdir(parents=True, exist_ok=True)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            sampler=self.sampler,
            directions=self._get_directions(),
            load_if_exists=True,
        )
        if study.trials and hasattr(study.sampler, "reseed_rng"):
            study.sampler.reseed_rng()  # a continued search must not draw the seed's first points again
        stale = [t for t in study.trials if t.state == TrialState.RUNNING]
        if stale:
            log.info("continuing the search: %d trial(s) left running run again first", len(stale))
        for frozen in stale:
            self._launch(study, [optuna.trial.Trial(study, frozen._trial_id)], space, fixed)
        while (left := self.n_trials - _ended(study)) > 0:
            self._launch(study, [study.ask() for _ in range(min(self.n_jobs, left))], space, fixed)
        self._write_results(study)

    def _space(self, arguments: list[str]) -> tuple[dict, dict]:
        """The search space and the fixed values; a space Optuna cannot sample (a reversed interval, the
        log of 0) is one line naming it and exit status 2, before any study or trial exists."""
        try:
            self._process_searchspace_config()
            space, fixed = create_params_from_overrides([*self._parse_sweeper_params_config(), *arguments])
        except (ValueError, TypeError) as e:
            print(f"error: hydra.sweeper.params: {' '.join(str(e).split())}", file=sys.stderr)
            raise SystemExit(USER_ERROR_EXIT) from None
        return {**(self.search_space_distributions or {}), **space}, fixed

    def _launch(self, study: optuna.Study, trials: list, space: dict, fixed: dict) -> None:
        """Trials ``trials`` (consecutive numbers) as jobs numbered like them; their values told."""
        overrides = self._configure_trials(trials, space, fixed)
        assert self.launcher is not None, "setup() makes the launcher"
        returns = self.launcher.launch(overrides, initial_job_idx=trials[0].number)
        for trial, ret in zip(trials, returns):
            value = self._value(ret)
            if value is None:
                study.tell(trial, state=TrialState.FAIL)
            else:
                study.tell(trial, value)

    def _value(self, ret: JobReturn) -> float | None:
        """The objective from the job's ``metrics.json`` (None: the job failed or has no such figure)."""
        if ret.status == JobStatus.FAILED:
            log.warning("trial failed: %s", ret._return_value)
            return None
        out = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir") if ret.hydra_cfg is not None else None
        folder = Path(str(out or ret.working_dir))
        return objective_of(folder, self.objective)

    def _write_results(self, study: optuna.Study) -> None:
        trials = [
            {"trial": t.number, "state": t.state.name, "value": t.value, "params": t.params} for t in study.trials
        ]
        done = [t for t in study.trials if t.state == TrialState.COMPLETE]
        best = study.best_trial if done else None
        write_json(
            Path(self.sweep_dir) / RESULTS_FILE,
            {
                "objective": self.objective,
                "direction": self._get_directions()[0],
                "best": None if best is None else {"trial": best.number, "value": best.value, "params": best.params},
                "trials": trials,
            },
        )
        if best is not None:
            log.info("best trial %d: %s = %.4f with %s", best.number, self.objective, best.value, best.params)


def _ended(study: optuna.Study) -> int:
    return sum(t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED) for t in study.trials)


def objective_of(folder: Path, name: str) -> float | None:
    """Metric ``name`` of the first row of ``folder/metrics.json`` that has it (None: no such figure)."""
    try:
        rows = flat_rows(read_metrics(folder / METRICS_FILE))
    except (OSError, MetricsFileError) as e:
        log.warning("%s: no objective (%s)", folder, e)
        return None
    for row in rows:
        value = (row.get("metrics") or {}).get(name, row.get(name))
        if isinstance(value, (int, float)):
            return float(value)
    log.warning("%s: no %s in its metrics.json rows", folder, name)
    return None
