"""A trainable retriever from outside gsr-train (``examples/plugin_retriever``) joins with zero edits.

The plugin block of docs/how-to/add-a-retriever.md runs exactly as written in a fresh checkout:
install the package, train it with ``train.py``, score the run with ``eval.py``, sweep it against
the built-ins. Then what a user would also do: serve the trained checkpoint by name
(``retriever.name=trained``), stop a plugin run with SIGTERM mid-training and continue it with
``resume=auto`` (same figures as the uninterrupted run), and make a mistake in its options (one
line, exit 2). ``src/`` never names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gsr_train.eval.tail import in_run

from .conftest import REPO
from .doc_blocks import blocks
from .test_readme_commands import _argv, _checkout, _env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BLOCK = blocks("docs/how-to/add-a-retriever.md", "A method that trains, as a plugin")[0]
COMMANDS = [line.strip() for line in BLOCK.splitlines() if line.strip() and not line.startswith("#")]
PLUGIN_NAMES = ("edge_mlp", "edge-mlp", "EdgeMLP")


def _run(argv: list[str], cwd: Path, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, **kw)


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def _sp_recall(folder: Path) -> dict:
    return _metrics(folder)["metrics"]["overall"]["sp_recall"]


@contextlib.contextmanager
def _one_install_at_a_time():
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "gsr_train_plugin_install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_plugin_commands(commands: list[str], tmp_path_factory, label: str, cache: Path) -> tuple[Path, dict]:
    """A docs plugin block's commands, in order, in a fresh checkout with the user's ``cache``; the
    checkout and its env."""
    root = _checkout(tmp_path_factory.mktemp(label))
    (root / "examples").symlink_to(REPO / "examples")
    env = _env(cache)
    for line in commands:
        argv = _argv(line, root)
        if argv[0] == "pip":
            argv = [sys.executable, "-m", "pip", *argv[1:]]
            with _one_install_at_a_time():  # xdist workers each run this fixture: one pip per environment
                proc = _run(argv, root, env)
        else:
            proc = _run(argv, root, env)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return root, env


def assert_src_never_names(names: tuple[str, ...]) -> None:
    for path in (REPO / "src").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".yaml", ".txt", ".toml"):
            text = path.read_text(errors="replace")
            assert not any(n in text for n in names), path
    for path in (REPO / "conf").rglob("*.yaml"):
        assert not any(n in path.read_text() for n in names), path


def readme_run_fixture(commands: list[str], label: str):
    """The module fixture ``readme_run`` of both plugin test files, written once: ``commands`` (a docs plugin
    block) run in order in a fresh checkout; the checkout and its env."""

    @pytest.fixture(scope="module")
    def readme_run(tmp_path_factory, user_cache):
        """The block's commands run once in a fresh checkout; the checkout and its env."""
        return run_plugin_commands(commands, tmp_path_factory, label, user_cache)

    return readme_run


def stop_then_resume(root: Path, env: dict, run: Path, args: list[str], target: str, calls: str) -> None:
    """A plugin run stopped by SIGTERM at the ``calls``-th call of ``target``, then continued with ``resume=auto``:
    the checks both plugin files make of it."""
    stopped = _run(
        [sys.executable, "-m", "tests.signal_at", target, calls, "TERM", "train.py", *args],
        root,
        {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))},
    )
    assert stopped.returncode == 128 + 15, stopped.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert "resume=auto" in stopped.stderr and (run / "checkpoints" / "last.ckpt").is_file()
    resumed = _run([sys.executable, "train.py", *args, "resume=auto"], root, env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


# the plugin commands of docs/how-to/add-a-retriever.md
readme_run = readme_run_fixture(COMMANDS, "plugin")


def test_src_never_names_the_plugin():
    assert_src_never_names(PLUGIN_NAMES)


def test_readme_commands_train_evaluate_and_sweep_the_plugin(readme_run):
    root, _ = readme_run
    (train,) = sorted((root / "outputs" / "retrieve").iterdir())
    figures = _metrics(train)
    assert figures["method"] == "EdgeMLP" and figures["training"]["epochs_run"] >= 1
    assert in_run(train, figures["checkpoint"]).is_file() and (train / "checkpoints" / "last.ckpt").is_file()
    assert json.loads((train / "run.json").read_text())["status"] == "finished"
    (evaluated,) = sorted((root / "outputs" / "eval").iterdir())
    note = json.loads((evaluated / "eval.json").read_text())
    assert note["method"] == "retrieve" and Path(note["checkpoint"]) == in_run(train, figures["checkpoint"])
    assert _sp_recall(evaluated) == _sp_recall(train)  # the same checkpoint on the same split
    (sweep,) = sorted((root / "multirun" / "retrieve").iterdir())
    table = (sweep / "aggregate.md").read_text()
    for method in ("cosine", "ppr", "EdgeMLP"):
        assert f"| {method} |" in table, table
    assert (sweep / "aggregate_recall.png").stat().st_size > 0
    # the trained plugin beats the untrained cosine baseline at small K
    swept = {_metrics(p)["method"]: p for p in sweep.iterdir() if (p / "metrics.json").is_file()}
    assert _sp_recall(swept["EdgeMLP"])["10"] > _sp_recall(swept["cosine"])["10"]
    assert _sp_recall(swept["EdgeMLP"]) == _sp_recall(train)  # the sweep point trains the same way


def test_trained_checkpoint_is_a_retriever_by_name(readme_run):
    root, env = readme_run
    (train,) = sorted((root / "outputs" / "retrieve").iterdir())
    best = in_run(train, _metrics(train)["checkpoint"])
    out = root / "served"
    proc = _run(
        [
            sys.executable,
            "train.py",
            "+experiment=retrieve",
            "retriever.name=trained",
            f"+retriever.options.checkpoint={best}",
            f"hydra.run.dir={out}",
        ],
        root,
        env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _metrics(out)["method"] == "EdgeMLP" and _sp_recall(out) == _sp_recall(train)


def test_sigterm_mid_training_then_resume_matches_the_uninterrupted_run(readme_run):
    root, env = readme_run
    (train,) = sorted((root / "outputs" / "retrieve").iterdir())
    run = root / "killed"
    args = ["+experiment=retrieve", "retriever.name=edge-mlp", f"hydra.run.dir={run}"]
    stop_then_resume(root, env, run, args, "edge_mlp.scorer:EdgeMLP.training_step", "25")
    assert _sp_recall(run) == _sp_recall(train)


def test_a_wrong_plugin_option_is_one_line(readme_run):
    root, env = readme_run
    proc = _run(
        [sys.executable, "train.py", "+experiment=retrieve", "retriever.name=edge-mlp", "+retriever.options.hidden=0"],
        root,
        env,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: retriever edge_mlp.scorer.EdgeMLP: hidden must be >= 1, got 0"
    ), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_eval_refuses_a_trainable_retriever_without_a_checkpoint(readme_run):
    root, env = readme_run
    proc = _run([sys.executable, "eval.py", "+experiment=retrieve", "retriever.name=edge-mlp"], root, env)
    assert proc.returncode == 2 and "is trainable: eval.py scores a trained one" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_plugin_run_gets_an_explorer_page_with_no_code_of_its_own(readme_run):
    """``gsr-train explore`` reads the plugin's results file as any retriever's: its view ranks triples."""
    import base64
    import gzip
    import re

    root, env = readme_run
    (train,) = sorted((root / "outputs" / "retrieve").iterdir())
    proc = _run([sys.executable, "-m", "gsr_train.cli", "explore", str(train)], root, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = re.search(r'id="summary">([^<]*)<', (train / "explore_test.html").read_text()).group(1)
    doc = json.loads(gzip.decompress(base64.b64decode(text)))
    (view,) = [v for v in doc["views"] if v["kind"] == "triples"]
    assert "EdgeMLP" in view["label"] and len(view["first"]) == len(doc["ids"])
    assert sum(r is not None for r in view["first"]) > len(doc["ids"]) // 2  # answers found, ranked


def test_the_plugins_factored_first_layer_is_the_mlp_over_concatenated_parts(tmp_path, monkeypatch):
    """``EdgeMLP.forward`` applies its first layer per node and per (question, relation) pair; the scores are
    those of the MLP over each triple's concatenated ``[q*h, q*r, q*t, topic(h), topic(t)]`` (its docstring)."""
    import dataclasses

    import torch

    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch
    from gsr_train.kg.index import get_index
    from gsr_train.text.embeddings import get_embeddings

    from .subgraphrag_toy import write_toy

    monkeypatch.syspath_prepend(str(REPO / "examples" / "plugin_retriever"))
    sys.modules.pop("edge_mlp", None)
    sys.modules.pop("edge_mlp.scorer", None)
    from edge_mlp.scorer import EdgeMLP

    index = get_index(write_toy(tmp_path / "data"), cache_dir=tmp_path / "cache")
    emb = get_embeddings(index, {"name": "hashing", "dim": 32}, tmp_path / "cache")
    graphs = index["train"]
    has_text = emb.entity_has_text.clone()
    has_text[::3] = False  # a third of the entities without text: the learned vector
    batch = make_batch(graphs, list(range(6)), node_features(graphs, "topic", 0, 0), emb.question["train"],
                       emb.entity, has_text, emb.relation)  # fmt: skip
    torch.manual_seed(0)
    n = batch.node_q.numel()  # a topic flag on heads and tails alike, so the two topic weights are told apart
    batch = dataclasses.replace(batch, feat_rows=(torch.rand(n, 1) < 0.5).float(), node_frow=torch.arange(n))
    module = EdgeMLP(dim=32, hidden=16)
    torch.nn.init.normal_(module.no_text)
    nodes = torch.cat([batch.ent_emb, module.no_text[None]])[batch.node_ent]
    q = batch.q_emb[batch.triple_question()]
    r = batch.rel_emb[batch.pair_rel[batch.triple_pair]]
    topic = batch.feat_rows[batch.node_frow, :1]
    h, t = nodes[batch.head], nodes[batch.tail]
    parts = torch.cat([q * h, q * r, q * t, topic[batch.head], topic[batch.tail]], dim=-1)
    assert (batch.node_ent == batch.ent_emb.shape[0]).any() and topic[batch.tail].sum() > 0
    expected = module.mlp(parts).squeeze(-1)
    got = module(batch)
    assert got.shape == (batch.num_triples,) and batch.num_triples > 50
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
