"""`gsr-train publish`: dry run lists files + card, the real path calls HfApi, the token is never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gsr_train.cli import main
from gsr_train.export.card import build_card
from gsr_train.export.publish import publish

SENTINEL = "hf_SENTINEL_do_not_leak_8d1f3a"


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A small exported folder (no model needed to test publishing)."""
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"scorer": {"hidden": 8}}))
    (out / "model.safetensors").write_bytes(b"\0" * 128)
    card = build_card(
        {
            "kind": "subgraphrag",
            "name": "tiny",
            "data": "webqsp",
            "config": {"hidden": 8},
            "metrics": {"test/answer_recall@100": 0.9},
            "files": ["config.json", "model.safetensors"],
            "source": "run/checkpoints/best.ckpt",
        },
        where="org/tiny",
    )
    card.save(str(out / "README.md"))
    return out


def _no_sentinel_anywhere(root: Path, *texts: str) -> None:
    for text in texts:
        assert SENTINEL not in text
    for p in root.rglob("*"):
        if p.is_file():
            assert SENTINEL.encode() not in p.read_bytes(), p


def test_card_states_data_metrics_and_loading(folder):
    card = (folder / "README.md").read_text()
    assert "rmanluo/RoG-webqsp" in card and "| test/answer_recall@100 | 0.9000 |" in card
    assert 'SubgraphRAGScorer.from_pretrained("org/tiny")' in card
    from huggingface_hub import ModelCard

    meta = ModelCard(card).data.to_dict()  # the YAML header parses as Hub metadata
    assert meta["library_name"] == "gsr-train" and meta["datasets"] == ["rmanluo/RoG-webqsp"]


def test_card_redacts_secret_values(monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-verysecretvalue")
    card = build_card({"kind": "gsr", "name": "x", "config": {"note": "sk-verysecretvalue"}, "files": []})
    assert "sk-verysecretvalue" not in str(card) and "<redacted>" in str(card)


def test_dry_run_lists_files_and_card_without_the_token(folder, tmp_path, capsys):
    assert main(["publish", str(folder), "--repo_id", "org/tiny", "--dry_run"]) == 0
    out = capsys.readouterr()
    assert "DRY RUN" in out.out
    for name in ("config.json", "model.safetensors", "README.md"):
        assert name in out.out
    assert "model card (README.md)" in out.out and "## How to load" in out.out
    assert "token: found in $HF_TOKEN" in out.out
    _no_sentinel_anywhere(tmp_path, out.out, out.err)


class FakeApi:
    def __init__(self):
        self.calls = []

    def create_repo(self, **kw):
        self.calls.append(("create_repo", kw))

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", kw))
        return type("Commit", (), {"commit_url": "https://huggingface.co/org/tiny/commit/abc"})()


def test_upload_path_passes_the_token_in_memory_only(folder, tmp_path, capsys):
    api = FakeApi()
    plan = publish(folder, "org/tiny", private=True, api=api)
    (name1, create), (name2, upload) = api.calls
    assert name1 == "create_repo" and create["repo_id"] == "org/tiny" and create["private"] is True
    assert name2 == "upload_folder" and upload["folder_path"] == str(folder) and upload["repo_id"] == "org/tiny"
    assert create["token"] == upload["token"] == SENTINEL
    assert plan.url.endswith("/commit/abc")
    out = capsys.readouterr()
    _no_sentinel_anywhere(tmp_path, out.out, out.err, plan.describe())


def test_refuses_a_folder_that_contains_the_token(folder):
    (folder / "notes.txt").write_text(f"oops {SENTINEL}")
    with pytest.raises(RuntimeError, match="secret"):
        publish(folder, "org/tiny", dry_run=True)


def test_missing_token_and_bad_repo_id_are_clear_errors(folder, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(RuntimeError, match=r"\$HF_TOKEN"):
        publish(folder, "org/tiny", api=FakeApi())
    assert main(["publish", str(folder), "--repo_id", "no-slash", "--dry_run"]) == 2
    assert "ORG/NAME" in capsys.readouterr().err


def test_dry_run_lists_exactly_what_the_upload_sends(folder, capsys):
    """Nested dotfiles, bytecode and temp files: the plan and the real upload agree, file by file."""
    from huggingface_hub.hf_api import DEFAULT_IGNORE_PATTERNS
    from huggingface_hub.utils import filter_repo_objects

    for rel in (
        "sub/.hidden",
        "sub/deeper/.env",
        ".top",
        "x.tmp",
        "sub/w.tmp",
        "__pycache__/a.pyc",
        "sub/__pycache__/b.pyc",
        ".git/config",
        "sub/kept.json",
        "sub/deeper/kept.bin",
    ):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("x")

    class Api:  # what HfApi.upload_folder does with its arguments (its own filter + defaults), offline
        def create_repo(self, **kwargs):
            return None

        def upload_folder(self, folder_path, ignore_patterns, **kwargs):
            every = sorted(p.relative_to(folder_path).as_posix() for p in Path(folder_path).glob("**/*") if p.is_file())
            self.sent = list(filter_repo_objects(every, ignore_patterns=[*ignore_patterns, *DEFAULT_IGNORE_PATTERNS]))
            return "https://hub/commit"

    planned = [name for name, _ in publish(folder, "org/tiny", dry_run=True, out=lambda *_: None).files]
    api = Api()
    publish(folder, "org/tiny", api=api, out=lambda *_: None)
    assert planned == api.sent
    assert "sub/kept.json" in planned and "sub/deeper/kept.bin" in planned
    assert not any(
        part.startswith(".") or part == "__pycache__" or part.endswith(".tmp")
        for name in planned
        for part in name.split("/")
    )
