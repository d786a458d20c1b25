"""Text encoders and the embedding store: offline MiniLM, once-only encoding, cache safety."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from gsr_train.kg.index import KGIndex, build_index
from gsr_train.text.embeddings import (
    MATRIX_FILE,
    META_FILE,
    PROGRESS_FILE,
    EmbeddingTable,
    embed_texts,
    get_embeddings,
    relation_words,
)
from gsr_train.text.encoders import EncoderUnavailable, HashingEncoder, TextEncoder, load_encoder

from .conftest import can_mount_tmpfs
from .obama_helpers import BORN, MARRIED, write_splits


class SpyEncoder(TextEncoder):
    """Wraps an encoder and records every text it is asked to encode."""

    def __init__(self, inner: TextEncoder, fail_after: int | None = None):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.normalize, self.batch_size = inner.normalize, 2
        self.calls: list[str] = []
        self.fail_after = fail_after

    def identity(self):
        return self.inner.identity()

    def encode(self, texts, batch_size=None, progress=None):
        if self.fail_after is not None and len(self.calls) + len(texts) > self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls.extend(texts)
        return self.inner.encode(texts)


@pytest.fixture()
def tiny_index(tmp_path) -> KGIndex:
    data = write_splits(tmp_path / "data", {"train": [BORN], "test": [MARRIED]})
    return build_index(data, ("train", "test"))


def test_minilm_offline_normalised_and_semantic(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = load_encoder({"name": "minilm", "batch_size": 8, "device": "cpu", "max_length": 64})
    assert enc.dim == 384 and enc.pooling == "mean"
    v = enc.encode(["the cat sits on the mat", "a kitten is sitting on a rug", "interest rates rose in march"])
    assert v.shape == (3, 384) and v.dtype == torch.float32
    assert torch.allclose(v.norm(dim=-1), torch.ones(3), atol=1e-5)
    sim = v @ v.T
    assert sim[0, 1] > sim[0, 2] + 0.3 and sim[0, 1] > sim[1, 2] + 0.3
    # length sorting inside encode must not change the row order
    assert torch.allclose(enc.encode(["interest rates rose in march", "the cat sits on the mat"]), v[[2, 0]], atol=1e-5)


def test_a_model_encoder_keeps_freed_memory_for_its_next_batch(monkeypatch, malloc_requests):
    """A batch's activations are tens of MB (256 texts x tokens x 1536 in MiniLM's MLPs): encoding asks
    glibc to keep freed blocks for the next batch, not map and page-fault them in again."""
    import gsr_train.memory as memory

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    load_encoder({"name": "minilm", "batch_size": 8, "device": "cpu", "max_length": 64}).encode(["a cat", "a mat"])
    assert memory._policy == "keep" and len(malloc_requests) == 1


def test_gte_large_offline_fails_fast_with_hint(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    # an empty hub cache, so the test holds even where gte-large was downloaded before
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty_hub_cache"))
    with pytest.raises(EncoderUnavailable, match="hub access or point encoder.path at a local folder"):
        load_encoder("gte-large")


def test_unknown_encoder_and_options_are_errors():
    with pytest.raises(ValueError, match="unknown encoder"):
        load_encoder("no-such-encoder")
    with pytest.raises(ValueError, match="unknown options"):
        load_encoder("minilm", poolnig="cls")


def test_hashing_encoder_deterministic_and_normalised():
    a, b = HashingEncoder(dim=32), HashingEncoder(dim=32)
    x = a.encode(["people person place of birth", "Honolulu", ""])
    assert torch.equal(x, b.encode(["people person place of birth", "Honolulu", ""]))
    assert torch.allclose(x[:2].norm(dim=-1), torch.ones(2)) and x[2].abs().sum() == 0
    assert a.key == b.key != HashingEncoder(dim=16).key


def test_relation_words():
    assert relation_words("people.person.place_of_birth") == "people person place of birth"


def test_store_embeds_each_distinct_text_once_then_reuses(tiny_index, tmp_path):
    spy = SpyEncoder(HashingEncoder(dim=16))
    emb = get_embeddings(tiny_index, spy, tmp_path / "cache")
    texts_with_text = [e for e in tiny_index.entities if not e.startswith(("m.", "g."))]
    expected = (
        texts_with_text
        + list(tiny_index.relations)
        + ["where was barack obama born", "who is michelle obama married to"]
    )
    assert sorted(spy.calls) == sorted(expected)  # every distinct text, once, no MIDs
    assert emb.entity.shape == (len(tiny_index.entities), 16) and emb.relation.shape == (len(tiny_index.relations), 16)
    assert set(emb.question) == {"train", "test"} and emb.question["test"].shape == (1, 16)

    no_text = ~emb.entity_has_text
    assert [tiny_index.entities[i] for i in no_text.nonzero().flatten()] == ["m.02h98gq", "g.11b6"]
    assert emb.entity[no_text].abs().sum() == 0
    assert torch.allclose(emb.entity[emb.entity_has_text].norm(dim=-1), torch.ones(int(emb.entity_has_text.sum())))
    ref = HashingEncoder(dim=16).encode(tiny_index.entities)
    assert torch.allclose(emb.entity[emb.entity_has_text], ref[emb.entity_has_text])

    spy.calls.clear()
    again = get_embeddings(tiny_index, spy, tmp_path / "cache")
    assert spy.calls == []
    assert torch.equal(again.entity, emb.entity) and torch.equal(again.question["test"], emb.question["test"])

    words = get_embeddings(tiny_index, spy, tmp_path / "cache", relation_text="words")
    assert sorted(spy.calls) == sorted(relation_words(r) for r in tiny_index.relations)
    assert not torch.equal(words.relation, emb.relation)


def test_duplicates_encoded_once_and_copied(tmp_path):
    spy = SpyEncoder(HashingEncoder(dim=8))
    out = embed_texts(["a", "b", "a", "m.0x", "a"], spy, tmp_path, encode_mask=[1, 1, 1, 0, 1])
    assert sorted(spy.calls) == ["a", "b"]
    assert torch.equal(out[0], out[2]) and torch.equal(out[0], out[4]) and out[3].abs().sum() == 0


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "edit_meta", "drop_meta"])
def test_damaged_cache_is_rebuilt(tmp_path, damage):
    texts = [f"text number {i}" for i in range(20)]
    spy = SpyEncoder(HashingEncoder(dim=8))
    first = embed_texts(texts, spy, tmp_path).clone()
    table = EmbeddingTable(texts, spy, tmp_path)
    matrix, meta = table.folder / MATRIX_FILE, table.folder / META_FILE
    if damage == "truncate":
        os.truncate(matrix, matrix.stat().st_size - 16)
    elif damage == "flip_byte":
        data = bytearray(matrix.read_bytes())
        data[-3] ^= 0xFF
        matrix.write_bytes(bytes(data))
    elif damage == "edit_meta":
        info = json.loads(meta.read_text())
        info["rows"] = 19
        meta.write_text(json.dumps(info))
    else:
        meta.unlink()
    spy.calls.clear()
    again = embed_texts(texts, spy, tmp_path)
    assert sorted(spy.calls) == sorted(texts)
    assert torch.equal(again, first)


def test_killed_build_is_not_trusted_and_resumes(tmp_path):
    texts = [f"entity {i}" for i in range(10)]
    killer = SpyEncoder(HashingEncoder(dim=8), fail_after=6)
    with pytest.raises(KeyboardInterrupt):
        embed_texts(texts, killer, tmp_path, chunk_rows=3)
    table = EmbeddingTable(texts, killer, tmp_path)
    assert not table.folder.exists()  # nothing final was left behind
    assert json.loads((table.partial / PROGRESS_FILE).read_text())["done"] == 6
    spy = SpyEncoder(HashingEncoder(dim=8))
    out = embed_texts(texts, spy, tmp_path, chunk_rows=3)
    assert len(spy.calls) == 4 and set(spy.calls) | set(killer.calls) == set(texts)  # resumed
    assert torch.allclose(out, HashingEncoder(dim=8).encode(texts))
    assert not table.partial.exists()


def test_changed_texts_get_a_new_table(tmp_path):
    spy = SpyEncoder(HashingEncoder(dim=8))
    embed_texts(["a", "b"], spy, tmp_path)
    embed_texts(["a", "c"], spy, tmp_path)
    assert spy.calls == ["a", "b", "a", "c"]
    tables = [p for p in (tmp_path / "embeddings" / spy.key).iterdir() if not p.name.startswith(".")]
    assert len(tables) == 2 and all((p / MATRIX_FILE).exists() for p in tables)


def test_warm_cache_on_webqsp_mini_reads_memmaps_without_encoding(webqsp_mini, tmp_path, monkeypatch):
    index = build_index(webqsp_mini, ("test",))
    enc = HashingEncoder(dim=64)
    first = get_embeddings(index, enc, tmp_path)
    calls = []
    original = HashingEncoder.encode
    monkeypatch.setattr(HashingEncoder, "encode", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    emb = get_embeddings(index, enc, tmp_path)
    assert calls == []
    assert torch.equal(emb.entity, first.entity)
    assert emb.entity.shape == (len(index.entities), 64)
    mids = np.array([e.startswith("m.") for e in index.entities])
    assert mids.any() and not emb.entity_has_text[torch.from_numpy(mids)].any()


# ------------------------------------------------------------------ a disk that fills while writing

_FILL_SCRIPT = """
import sys
from gsr_train.data.errors import report_user_errors
from gsr_train.text.embeddings import embed_texts
from gsr_train.text.encoders import HashingEncoder
cache = sys.argv[1]
texts = [f"entity number {i}" for i in range(2000)]  # 2000 x 256 float32: 2 MB, the disk holds 256 kB
report_user_errors(embed_texts, texts, HashingEncoder(dim=256), cache, cache_dirs=[cache])
"""


def test_full_disk_while_embedding_is_one_line_not_a_bus_error(tmp_path):
    """The matrix is written through a memory map: on a full disk that was SIGBUS (``Bus error``,
    exit 135, the run left 'running'). Its blocks are allocated before any encoding, so a full disk
    (a 256 kB tmpfs in a private mount namespace) is one ``error:`` line and exit 2."""
    import subprocess
    import sys

    if not can_mount_tmpfs():
        pytest.skip("needs unshare + mount (root) for a full file system")
    cache = tmp_path / "cache"
    cache.mkdir()
    mount = f'mount -t tmpfs -o size=256k tmpfs \'{cache}\' && exec "$0" "$@"'
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", mount, sys.executable, "-c", _FILL_SCRIPT, str(cache)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: cannot write the ") and f"embeddings into {cache}" in lines[0], lines
    assert "no space left" in lines[0] and "GSR_TRAIN_CACHE" in lines[0]


def test_full_disk_at_allocation_is_a_cache_error_and_frees_the_partial(tmp_path, monkeypatch):
    """The same without mounts (any user): ``posix_fallocate`` says ENOSPC."""
    import errno

    from gsr_train.data.errors import CacheWriteError

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    texts = [f"text {i}" for i in range(10)]
    spy = SpyEncoder(HashingEncoder(dim=8))
    with pytest.raises(CacheWriteError, match="no space left on its disk") as err:
        embed_texts(texts, spy, tmp_path)
    assert str(tmp_path) in str(err.value) and "GSR_TRAIN_CACHE" in str(err.value)
    assert spy.calls == []  # refused before any encoding
    table = EmbeddingTable(texts, spy, tmp_path)
    assert not table.partial.exists() and not table.folder.exists()
