"""``gsr-train`` on typer (issue 36, item 3): one program name and one help per verb, options spelled
as in the configs, one verb per meaning, a light ``--help``, the experiments listed by train.py,
and the generated CLI reference page kept current."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gsr_train.cli import VERBS, main, reference
from gsr_train.eval.schema import SCHEMA

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def test_top_level_help_lists_every_verb_once_and_imports_no_torch():
    code = (
        "import sys; from gsr_train.cli import main; status = main(['--help']); "
        "assert 'torch' not in sys.modules and 'hydra' not in sys.modules, 'heavy import'; sys.exit(status)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("Usage: gsr-train [OPTIONS] COMMAND [ARGS]...")
    assert "``" not in text and ":mod:" not in text
    listed = [line.split()[0] for line in text.split("Commands:", 1)[1].splitlines() if line.strip()]
    assert listed == list(VERBS)  # each verb once, in order


HEAVY = ("torch", "transformers", "lightning", "pyarrow", "datasets", "sklearn")


def test_every_verb_prints_its_help_and_refuses_a_wrong_option_without_heavy_imports():
    """Issue 49: ``gsr-train VERB --help`` (and a refused option) under a second: nothing heavy is
    imported to print text. One process goes through every verb and names the first that imports
    torch & co. (the times themselves: bench/bench_startup.py)."""
    code = f"""
import contextlib, io, sys
from gsr_train.cli import VERBS, main
heavy = {HEAVY!r}
for words in [[v] for v in VERBS] + [["reader", "score"]]:
    tries = [[*words, "--help"]]
    if VERBS[words[0]].config is None:  # a typer verb refuses an unknown option itself
        tries.append([*words, "--no_such_option"])
    for argv in tries:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = main(argv)
        assert status in (0, 2), (argv, status)
        loaded = [m for m in heavy if m in sys.modules]
        assert not loaded, f"gsr-train {{' '.join(argv)}} imported {{loaded}}"
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_verb_has_its_own_usage_line(capsys):
    for words in [[v] for v in VERBS] + [["reader", "score"]]:
        assert main([*words, "--help"]) == 0, words
        out = capsys.readouterr().out
        assert out.startswith(f"Usage: gsr-train {' '.join(words)} "), (words, out[:200])
        assert "python -m" not in out and "Powered by Hydra" not in out and "== Config groups" not in out


def test_hydra_verbs_print_their_own_options(capsys):
    assert main(["llm-label-triples", "--help"]) == 0
    out = capsys.readouterr().out
    assert "data.dir = null" in out and "RoG folder / hub name" in out and "num_candidates = 40" in out
    assert "hydra." not in out and "defaults" not in out


def test_score_has_one_meaning_and_the_old_form_names_the_new_verb(capsys, tmp_path):
    assert main(["score", "--results", "r.jsonl", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: gsr-train score:") and "gsr-train recall --results" in err
    assert main(["score", str(tmp_path)]) == 2  # a folder: named as one, not as missing
    err = capsys.readouterr().err.strip()
    assert err == f"error: gsr-train score: {tmp_path} is a folder: give the prediction files in it"
    (tmp_path / "r.jsonl").write_text("")
    assert main(["recall", "--results", str(tmp_path / "r.jsonl"), "--data", str(tmp_path), "--ks", "0"]) == 2
    assert "--ks" in capsys.readouterr().err


def test_options_are_spelled_as_in_the_configs_and_old_spellings_warn(capsys, tmp_path):
    assert main(["cosine", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--top_k" in out and "--k " not in out and "--cache_dir" in out and "--batch_size" in out
    assert main(["aggregate", str(tmp_path), "--no-write"]) == 2  # no runs there: the verb's own error
    err = capsys.readouterr().err
    assert "warning: --no-write is spelled --no_write now" in err
    assert err.strip().splitlines()[-1].startswith("error: gsr-train aggregate: no run results under")


def test_a_refused_command_line_is_one_line_and_exit_2(capsys):
    assert main(["cosine", "--data", "x", "--mode", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: gsr-train cosine:") and "nosuch" in err
    assert main(["nosuch"]) == 2 and "No such command" in capsys.readouterr().err


def _train(tmp_path, *args):
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=tmp_path, capture_output=True, text=True, env=ENV
    )


def test_train_py_lists_the_experiments_without_one(tmp_path):
    experiments = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
    assert experiments and not [e for e in experiments if e.endswith("_defaults")]  # starting points: conf/recipes
    shown = _train(tmp_path, "--help")
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("experiments (conf/experiment/NAME.yaml):\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == experiments
    assert "Structure-free baseline" in next(line for line in listed if "cosine_baseline" in line)
    refused = _train(tmp_path, "data=webqsp_mini")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: no experiment given: python train.py +experiment=NAME")
    assert "subgraphrag_quickstart" in refused.stderr and "Seed set" not in refused.stdout + refused.stderr
    assert not (tmp_path / "outputs").exists()  # refused before Hydra made a run folder


@pytest.mark.parametrize("page", ["docs/reference/cli.md"])
def test_cli_reference_page_is_current(page):
    committed = (REPO / page).read_text(encoding="utf-8")
    assert committed == reference(), f"{page} is stale: run python tools/write_cli_reference.py"


def test_explore_refuses_a_split_the_run_lacks_before_torch_loads(tmp_path):
    """``explore RUN --split val`` on a run scored on test alone: one line naming the splits it has, and
    nothing heavy imported (the run folders are checked before the KG index and torch load; it took
    6.7 s and 596 MB before, bench/bench_startup.py)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "finished", "experiment": "x"}))
    row = {"method": "subgraphrag", "split": "test", "k": 10, "metrics": {"answer_recall@10": 0.5}}
    (run / "metrics.json").write_text(json.dumps({"schema": SCHEMA, "rows": [row]}))
    code = f"""
import contextlib, io, sys
from gsr_train.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = main(["explore", {str(run)!r}, "--split", "val"])
print(err.getvalue().strip())
loaded = [m for m in {HEAVY!r} if m in sys.modules]
assert status == 2 and not loaded, (status, loaded)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip()
    assert "\n" not in line and "no rows of split 'val'" in line and "(it has: test)" in line, line
