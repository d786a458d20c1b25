"""The local LLM server: requests one at a time vs the same requests batched (BatchingBackend).

    .venv/bin/python bench/bench_llm_batching.py                  # SmolLM2-135M, 16 answers of 64 tokens
    .venv/bin/python bench/bench_llm_batching.py --requests 32 --max-tokens 128 --threads 2

Both ways go through the real HTTP server and client (no cache), same prompts, greedy: "single"
serves the model unbatched with client concurrency 1 (the server before batching), "batched"
serves it through BatchingBackend with client concurrency ``--batch``. Also reports whether the
batched answers equal the single ones. Prints a table and writes bench/results/bench_llm_batching.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))


def _requests(n: int, max_tokens: int):
    from gsr_train.llm.client import ChatRequest

    topics = ["Ohio", "Richard Nixon", "Jamaica", "the Eiffel Tower", "John F. Kennedy", "Tokyo", "the Nile", "Mozart"]
    return [
        ChatRequest(
            f"r{i}",
            [{"role": "user", "content": f"Describe {topics[i % len(topics)]} in one paragraph (variant {i})."}],
            {"max_tokens": max_tokens, "temperature": 0},
        )
        for i in range(n)
    ]


def _serve_and_ask(backend, concurrency: int, requests) -> tuple[float, list[str]]:
    from gsr_train.llm.client import ChatClient
    from gsr_train.llm.server import serve_in_thread

    with serve_in_thread(backend, "bench") as srv:
        client = ChatClient(
            {
                "base_url": srv.base_url,
                "model": "bench",
                "use_cache": False,
                "api_key_env": None,
                "concurrency": concurrency,
            }
        )
        t0 = time.perf_counter()
        results = client.run(requests)
        return time.perf_counter() - t0, [r.text or "" for r in results]


def main() -> None:
    import torch
    from benchutil import peak_rss_mb, save_figures

    from gsr_train.llm.local_model import BatchingBackend, TransformersBackend

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_llm_batching.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = TransformersBackend.load(a.model)
    reqs = _requests(a.requests, a.max_tokens)
    single_s, single = _serve_and_ask(model, 1, reqs)
    batched_s, batched = _serve_and_ask(BatchingBackend(model, a.batch), a.batch, reqs)
    same = sum(x == y for x, y in zip(single, batched))
    rows = [
        {
            "way": "single (one at a time)",
            "seconds": round(single_s, 2),
            "requests_per_s": round(a.requests / single_s, 3),
        },
        {
            "way": f"batched (up to {a.batch})",
            "seconds": round(batched_s, 2),
            "requests_per_s": round(a.requests / batched_s, 3),
        },
    ]
    speedup = single_s / batched_s
    print(f"\n{a.requests} requests x {a.max_tokens} tokens, {model.name}, {a.threads} threads")
    print("| way | seconds | requests/s |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['way']} | {r['seconds']} | {r['requests_per_s']} |")
    print(
        f"\nspeed-up batched / single: {speedup:.2f}x; identical answers: {same}/{a.requests}; "
        f"peak RSS {peak_rss_mb():.0f} MB"
    )
    save_figures(
        a.out,
        {
            "model": model.name,
            "requests": a.requests,
            "max_tokens": a.max_tokens,
            "batch": a.batch,
            "threads": a.threads,
            "rows": rows,
            "speedup": round(speedup, 3),
            "identical_answers": same,
            "peak_rss_mb": round(peak_rss_mb(), 1),
        },
    )


if __name__ == "__main__":
    main()
