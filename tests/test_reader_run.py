"""The reader pipeline end to end on a hand-made RoG folder: results files -> prompts -> LoRA -> metrics."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from .conftest import compose_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_reader_helpers import reader_run_overrides, tiny_llama_folder  # noqa: E402


def _rows(prefix: str, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        country, lang = f"Country {prefix}{i}", f"Language {prefix}{i}"
        graph = [
            [country, "location.country.languages_spoken", lang],
            [country, "location.country.capital", f"City {i}"],
            [f"City {i}", "location.location.containedby", country],
        ]
        absent = i == n - 1  # last question: answer not in the graph (counts for Score_h / -sub)
        rows.append(
            {
                "id": f"{prefix}-{i}",
                "question": f"what language is spoken in country {prefix}{i}",
                "answer": ["Atlantis"] if absent else [lang],
                "q_entity": [country],
                "a_entity": [] if absent else [lang],
                "graph": graph,
                "choices": [],
            }
        )
    return rows


def _write(folder: Path, split: str, rows: list[dict]) -> None:
    with gzip.open(folder / f"{split}.jsonl.gz", "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_reader_pipeline_train_and_eval_only(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    splits = {"train": _rows("tr", 6), "test": _rows("te", 4)}
    results = {}
    for split, rows in splits.items():
        _write(data, split, rows)
        results[split] = tmp_path / f"results_{split}.jsonl"
        results[split].write_text(
            "".join(
                json.dumps({"id": r["id"], "triples": r["graph"][::-1], "scores": [0.1, 0.5, 0.9]}) + "\n" for r in rows
            )
        )
    model = tiny_llama_folder(tmp_path / "tiny")
    common = [
        *reader_run_overrides(tmp_path, data, model),
        "qa.format=triples",
        "top_k=2",
        "qa.max_prompt_tokens=400",
        f"qa.retrieval.results.train={results['train']}",
        f"qa.retrieval.results.test={results['test']}",
        "qa.train.max_steps=2",
        "qa.train.batch_size=3",
        "qa.eval.batch_size=2",
        "qa.eval.max_new_tokens=4",
        "qa.merge=true",
    ]
    out = tmp_path / "run"
    cfg = compose_config(["+experiment=reader_webqsp_mini", f"paths.output_dir={out}", *common])
    from gsr_train.commands.reader_score import main
    from gsr_train.runs.reader import run

    value = run(cfg)
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["metrics"]) == {"base_none", "base_retrieved", "finetuned_retrieved", "finetuned_none"}
    fin = metrics["metrics"]["finetuned_retrieved"]
    assert value == fin["all"]["metrics"]["macro_f1"]
    assert fin["all"]["n"] == 4 and fin["sub"]["n"] == 3 and "hop=1" in fin
    assert metrics["train"]["steps"] == 2 and metrics["train"]["parameters"]["trainable"] > 0
    assert (out / "adapter" / "adapter_config.json").exists() and (out / "merged" / "config.json").exists()
    preds = [json.loads(x) for x in (out / "predictions_finetuned_retrieved.jsonl").read_text().splitlines()]
    assert len(preds) == 4 and preds[0]["evidence_shown"] == 2
    assert preds[0]["entities"][:2] == ["Country te0", "Language te0"]  # best-scored triple first
    assert "finetuned_retrieved" in (out / "qa_table.txt").read_text()
    # the evidence answering alone (its top candidate entity), next to every reader
    alone = metrics["retrieval_answers"]["all"]
    assert alone["n"] == 4 and 0.0 <= alone["metrics"]["hit@1"] <= 1.0
    assert "retrieval_answers" in (out / "qa_table.txt").read_text()
    assert any(row.get("variant") == "retrieval_answers" and row["method"] == "retrieval" for row in metrics["rows"])

    # score the saved adapter again (eval-only entry point), then re-score a predictions file
    out2 = tmp_path / "eval"
    cfg2 = compose_config(
        [
            "+experiment=reader_webqsp_mini",
            f"paths.output_dir={out2}",
            *common,
            f"qa.eval_only={out / 'adapter'}",
            "qa.eval.variants.finetuned=[retrieved]",
        ]
    )
    run(cfg2)
    again = json.loads((out2 / "metrics.json").read_text())["metrics"]
    assert set(again) == {"finetuned_retrieved"}
    assert again["finetuned_retrieved"]["all"]["metrics"] == pytest.approx(fin["all"]["metrics"])
    assert main([str(out / "predictions_finetuned_retrieved.jsonl"), "--out", str(tmp_path / "m.json")]) == 0
    rescored = json.loads((tmp_path / "m.json").read_text())
    assert rescored["all"]["metrics"] == pytest.approx(fin["all"]["metrics"])


READER_SCORE_MISTAKES = [
    (None, "does not exist"),
    ("folder", "is a folder: give a predictions file"),
    ('{"id": "q1", "prediction": ["a"], "answers": ["a"]}\nnot json', "line 2: not valid JSON"),
    ('{"prediction": ["a"], "answers": ["a"]}', "line 1: not a row of a reader run's predictions"),
    ('{"id": "q1", "prediction": ["a"]}', "line 1: needs a list of gold answers"),
    ('{"id": "q1", "prediction": ["a"], "answers": ["a"], "hops": "two"}', "'hops' must be a whole number"),
]


@pytest.mark.parametrize("text, message", READER_SCORE_MISTAKES)
def test_reader_score_of_a_bad_predictions_file_is_one_line(tmp_path, capsys, text, message):
    """``gsr-train reader score FILE``: a missing file, a folder or a bad row is one line naming it, exit 2."""
    from gsr_train.commands.reader_score import main

    path = tmp_path / "predictions_x.jsonl"
    if text == "folder":
        path.mkdir()
    elif text is not None:
        path.write_text(text + "\n")
    with pytest.raises(SystemExit) as stop:
        raise SystemExit(main([str(path)]))
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.splitlines() == [err], err
    assert err.startswith("error: gsr-train reader score") and str(path) in err and message in err, err


def test_missing_retrieval_is_a_clear_error(tmp_path):
    from gsr_train.readers.evidence import read_result_rows

    bad = tmp_path / "r.jsonl"
    bad.write_text(json.dumps({"id": "zzz", "triples": []}) + "\n")
    with pytest.raises(ValueError, match=r"r.jsonl: line 1: id 'zzz' is not in the split"):
        read_result_rows(bad, ["a", "b"])
    with pytest.raises(FileNotFoundError, match="retrieval results file not found"):
        read_result_rows(tmp_path / "nope.jsonl", ["a"])


def test_prompting_only_reader_through_the_llm_client(tmp_path):
    import httpx

    from gsr_train.readers.generate import generate_remote
    from gsr_train.readers.prompts import build_examples, parse_response

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        last = body["messages"][-1]["content"]
        text = "From the triples ...\nans: Language te0" if "te0" in last else "ans: not available"
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            },
        )

    rows = _rows("te", 2)
    questions = [{"id": r["id"], "question": r["question"], "answers": r["answer"]} for r in rows]
    results = {r["id"]: {"id": r["id"], "triples": r["graph"]} for r in rows}
    exs = build_examples(questions, results, "subgraphrag", 5, icl=True)
    cfg = {
        "base_url": "http://llm.test/v1",
        "model": "m",
        "api_key_env": None,
        "cache_path": str(tmp_path / "c.sqlite"),
        "max_retries": 0,
    }
    texts, usage = generate_remote(cfg, exs, 32, transport=httpx.MockTransport(answer))
    assert [parse_response(t, "subgraphrag") for t in texts] == [["Language te0"], []]
    assert seen[0]["max_tokens"] == 32 and seen[0]["messages"][2]["role"] == "assistant"  # the in-context example
    assert usage
    again, _ = generate_remote(cfg, exs, 32, transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    assert again == texts  # answered from the response cache, no new request
