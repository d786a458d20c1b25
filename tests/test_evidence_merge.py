"""Evidence from several retrievers in one prompt: merged in turn, de-duplicated, bounded per source."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from .conftest import compose_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_reader_helpers import reader_run_overrides, tiny_llama_folder  # noqa: E402

from .test_reader_run import _rows, _write  # noqa: E402


def _sources():
    from gsr_train.readers.evidence_merge import Source

    gnn = {
        "q": {
            "id": "q",
            "triples": [["A", "r1", "B"], ["B", "r2", "C"]],
            "paths": ["A -> r1 -> B -> r2 -> C", "A -> r1 -> B"],
            "answers": [{"name": "C", "prob": 0.9}, {"name": "B", "prob": 0.2}],
        }
    }
    sgr = {"q": {"id": "q", "triples": [["A", "r1", "B"], ["A", "r3", "D"], ["D", "r4", "E"]], "scores": [3, 2, 1]}}
    return Source("gnn", gnn, top_k=5), Source("sgr", sgr, top_k=2)


def test_sources_take_turns_rank_by_rank_and_a_line_is_shown_once():
    from gsr_train.readers.evidence_merge import merge_rows

    gnn, sgr = _sources()
    row = merge_rows([gnn, sgr], ["q", "missing"], "paths", {"q": ["A"]})["q"]
    lines = [(e["line"], e["source"]) for e in row["evidence"]]
    # gnn's best, sgr's best, gnn's second (already shown by sgr: dropped), sgr's second (top_k=2)
    assert lines == [("A -> r1 -> B -> r2 -> C", "gnn"), ("A -> r1 -> B", "sgr"), ("A -> r3 -> D", "sgr")]
    assert row["sources"] == {"gnn": 1, "sgr": 2}
    assert row["answers"] == ["C", "B", "D", "E"]  # gnn's candidates and sgr's triple ends, in turn, de-duplicated
    assert row["triples"] == [["A", "r1", "B"], ["B", "r2", "C"], ["A", "r3", "D"], ["D", "r4", "E"]]
    assert merge_rows([gnn, sgr], ["missing"], "paths")["missing"]["evidence"] == []
    with pytest.raises(ValueError, match="distinct labels"):
        merge_rows([gnn, gnn], ["q"], "paths")


def test_each_source_keeps_to_its_token_share_and_every_shown_line_names_its_source():
    from dataclasses import replace

    from gsr_train.readers.evidence_merge import merge_rows
    from gsr_train.readers.prompts import build_examples, within_shares

    assert within_shares(["a", "b", "a", "a"], {"a": 5, "b": None}, [3, 100, 3, 2]) == [0, 1, 3]
    gnn, sgr = _sources()
    merged = merge_rows([gnn, replace(sgr, share=4)], ["q"], "triples")
    question = [{"id": "q", "question": "what?", "answers": ["C"]}]
    (ex,) = build_examples(question, merged, "triples", k=10)
    # without a tokenizer a line costs len // 4 + 2 tokens: sgr's "(A, r3, D)" (4 tokens) fits, its next would not
    assert ex.sources == ["gnn", "gnn", "sgr"] and ex.evidence_shown == 3
    assert "(A, r3, D)" in ex.messages[-1]["content"] and "(D, r4, E)" not in ex.messages[-1]["content"]
    (closed,) = build_examples(question, merged, "triples", k=0)
    assert closed.sources == [] and closed.evidence_shown == 0


def _reader_setup(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    splits = {"train": _rows("tr", 4), "test": _rows("te", 3)}
    files: dict[str, dict[str, Path]] = {"paths": {}, "triples": {}}
    for split, rows in splits.items():
        _write(data, split, rows)
        files["paths"][split] = tmp_path / f"paths_{split}.jsonl"
        files["paths"][split].write_text(
            "".join(
                json.dumps({"id": r["id"], "triples": r["graph"][:1], "paths": [" -> ".join(r["graph"][0])]}) + "\n"
                for r in rows
            )
        )
        files["triples"][split] = tmp_path / f"triples_{split}.jsonl"
        files["triples"][split].write_text(
            "".join(json.dumps({"id": r["id"], "triples": r["graph"][1:], "scores": [0.9, 0.5]}) + "\n" for r in rows)
        )
    common = [
        *reader_run_overrides(tmp_path, data, tiny_llama_folder(tmp_path / "tiny")),
        "qa.format=paths",
        "top_k=3",
        "qa.max_prompt_tokens=400",
        "qa.train.enabled=false",
        "qa.eval.variants.base=[retrieved]",
        "qa.eval.batch_size=3",
        "qa.eval.max_new_tokens=4",
    ]
    return files, common


def test_a_reader_run_reads_merged_evidence_and_records_where_each_line_came_from(tmp_path):
    files, common = _reader_setup(tmp_path)
    sources = (
        f"qa.retrieval.sources=[{{label: gnn, results: {{test: {files['paths']['test']}}}}},"
        f"{{label: sgr, results: {{test: {files['triples']['test']}}}, top_k: 1}}]"
    )
    out = tmp_path / "run"
    from gsr_train.runs.reader import run

    run(compose_config(["+experiment=reader_webqsp_mini", f"paths.output_dir={out}", *common, sources]))
    metrics = json.loads((out / "metrics.json").read_text())
    info = metrics["retrieval"]["test"]
    assert info["evidence"].startswith("merged from gnn (top 3), sgr (top 1)")
    assert set(info["sources"]) == {"gnn", "sgr"} and info["lines"] == {"gnn": 3, "sgr": 3}
    rows = [json.loads(x) for x in gzip.open(out / "results_test.jsonl.gz", "rt").read().splitlines()]
    assert [e["source"] for e in rows[0]["evidence"]] == ["gnn", "sgr"]
    assert rows[0]["evidence"][1]["line"] == "Country te0 -> location.country.capital -> City 0"
    preds = [json.loads(x) for x in (out / "predictions_base_retrieved.jsonl").read_text().splitlines()]
    assert preds[0]["evidence_sources"] == ["gnn", "sgr"] and preds[0]["evidence_shown"] == 2
    assert metrics["retrieval_answers"]["all"]["n"] == 3
    assert (tmp_path / "cache" / "kg_index").is_dir()  # where a refused run must not have got to


@pytest.mark.parametrize(
    "extra, message",
    [
        (["qa.retrieval.retriever=cosine"], "qa.retrieval.sources is given, and so is qa.retrieval.retriever"),
        (["qa.retrieval.sources=[{label: a}]"], r"sources\[0\]: give exactly one of checkpoint, results or retriever"),
        (["qa.retrieval.sources=[{retriever: cosine}, {retriever: cosine}]"], "label 'cosine' is used twice"),
        (["qa.retrieval.sources=[{results: {test: /no/such.jsonl}}]"], r"sources\[0\].results.test: /no/such.jsonl"),
        (["qa.retrieval.sources=[{retriever: nope}]"], r"sources\[0\].retriever=nope: not a registered retriever"),
        (
            ["qa.train.enabled=true", "qa.retrieval.sources=[{results: {test: RESULTS}}]"],
            r"sources\[0\].results: no file for split train \(the run reads test, train\)",
        ),
    ],
)
def test_a_wrong_source_is_one_message_before_any_work(tmp_path, extra, message):
    from gsr_train.data.errors import PreflightError
    from gsr_train.runs.reader import run

    files, common = _reader_setup(tmp_path)
    extra = [e.replace("RESULTS", str(files["paths"]["test"])) for e in extra]
    if not any(e.startswith("qa.retrieval.sources") for e in extra):
        extra = [*extra, "qa.retrieval.sources=[{retriever: ppr}]"]
    cfg = compose_config(["+experiment=reader_webqsp_mini", f"paths.output_dir={tmp_path / 'run'}", *common, *extra])
    with pytest.raises(PreflightError, match=message):
        run(cfg)
    assert not (tmp_path / "cache" / "kg_index").exists()  # refused before the index was built


def test_source_options_are_typed_like_every_option():
    from gsr_train.options.check import recipe_errors, value_errors

    cfg = compose_config(["+experiment=reader_webqsp_mini", "qa.retrieval.sources=[{retriever: cosine, shar: 3}]"])
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg)
    assert any("qa.retrieval.sources[0].shar: not a EvidenceSource option" in e for e in recipe_errors(plain))
    cfg = compose_config(["+experiment=reader_webqsp_mini", "qa.retrieval.sources=[{retriever: cosine, share: 0}]"])
    assert any("qa.retrieval.sources[0].share=0: expected >= 1" in e for e in value_errors(OmegaConf.to_container(cfg)))


def test_the_readme_sources_command_composes_and_names_both_sources():
    """The merged-evidence command of docs/explanations/readers.md, as written (placeholders aside):
    Hydra parses it, the recipe checks pass, and the run sees two sources with their labels and share."""
    import shlex

    from omegaconf import OmegaConf

    from gsr_train.options.check import recipe_errors, value_errors
    from gsr_train.readers.evidence import evidence_sources
    from gsr_train.runs.reader import reader_recipe

    from .doc_blocks import page_text

    page = page_text("docs/explanations/readers.md")
    block = page.split("# evidence merged from several retrievers", 1)[1].split("\n# ", 1)[0]
    line = block.split("\n", 1)[1].replace("\\\n", " ")
    line = line.replace("<gnn run>", "outputs/gnnrag_webqsp_mini/2026-11-26_01-30-00")
    command = shlex.split(line.replace("<gsr run>", "outputs/gsr_webqsp_paths/2026-11-26_01-40-00"))
    assert command[:3] == ["python", "train.py", "+experiment=reader_webqsp_mini"]
    cfg = compose_config(command[2:])
    plain = OmegaConf.to_container(cfg)
    assert recipe_errors(plain) == [] and value_errors(plain) == []
    sources = evidence_sources(reader_recipe(cfg).qa.retrieval, ["test", "train"])
    assert [s.label for s in sources] == ["gnn", "gsr"] and sources[1].share == 120
    assert (sources[0].options or {})[
        "checkpoint"
    ] == "outputs/gnnrag_webqsp_mini/2026-11-26_01-30-00/checkpoints/best-XX.ckpt"


def test_a_registered_path_retriever_keeps_its_paths_and_answers_in_the_readers_evidence(tmp_path):
    """A registered retriever's own row fields (GSR chains executed into paths) reach the reader's
    evidence and its answer-from-retrieval, not only its triples."""
    files, common = _reader_setup(tmp_path)
    beams = tmp_path / "beams.jsonl"
    chain = {"chain": ["location.country.languages_spoken"], "score": -0.1}
    beams.write_text("".join(json.dumps({"id": f"te-{i}", "beams": [chain]}) + "\n" for i in range(3)))
    sources = (
        f"qa.retrieval.sources=[{{label: gsr, retriever: gsr, options: {{results: '{beams}'}}}},"
        f"{{label: sgr, results: {{test: {files['triples']['test']}}}}}]"
    )
    out = tmp_path / "run"
    from gsr_train.runs.reader import run

    run(compose_config(["+experiment=reader_webqsp_mini", f"paths.output_dir={out}", *common, sources]))
    rows = [json.loads(x) for x in gzip.open(out / "results_test.jsonl.gz", "rt").read().splitlines()]
    first = rows[0]["evidence"][0]
    assert first == {
        "line": "Country te0 -> location.country.languages_spoken -> Language te0",
        "source": "gsr",
        "entities": ["Country te0", "Language te0"],
    }
    assert rows[0]["answers"][0] == "Language te0"  # where the GSR path ends
    alone = json.loads((out / "metrics.json").read_text())["retrieval_answers"]["all"]["metrics"]
    assert alone["hit@1"] == pytest.approx(2 / 3)  # the third question's answer is not in its graph
