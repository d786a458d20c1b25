"""``python -m gsr_train.robustness [+experiment=robustness_webqsp_mini] [overrides]``: the robustness
command without train.py (same Hydra config tree; defaults to the WebQSP fixture experiment)."""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from gsr_train.config import register_resolvers

register_resolvers()
CONF = str(Path(__file__).resolve().parents[3] / "conf")


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig):
    from gsr_train.runs.common import run_experiment

    return run_experiment(cfg)


if __name__ == "__main__":
    if not any(a.startswith("+experiment=") for a in sys.argv[1:]):
        sys.argv.insert(1, "+experiment=robustness_webqsp_mini")
    main()
