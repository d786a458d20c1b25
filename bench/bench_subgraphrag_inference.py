"""SubgraphRAG inference speed: straightforward forward pass vs precomputed projections.

Part 1 (random tensors, WebQSP-sized): questions with ~4,300 triples and ~1,500 entities
each, 1024-d embeddings, hidden 1024. Triples scored per second by
  * the straightforward pass (gather z_q, z_h, z_r, z_t, DDE per triple, concatenate,
    Linear -> ReLU -> Linear), and
  * the precomputed-projection path (entity / relation projections computed once per
    model, then gathers + ReLU + output layer per triple),
in the same run, on the same graphs, with the same batching; ratio = fast / straightforward.

Part 1 also times the compiled kernels (:mod:`gsr_train.models.subgraphrag.serving`,
one graph per call), the default on CPU.

Part 2 (real fixture): average time to retrieve one question of webqsp_mini test
(DDE + scoring + top-K, embeddings cached, projections precomputed once), one question
at a time and batched, with the compiled kernels and with the torch path in the same
run (passes alternate between them; the machine's speed drifts).

    python bench/bench_subgraphrag_inference.py [--checkpoint RUN/checkpoints/best-XX.ckpt] [--device cuda]

``--device cuda``: the torch paths on the GPU (timers synchronised with it; the compiled kernels are
CPU code and are left out), peak GPU memory next to peak RSS.

Writes bench/results/bench_subgraphrag_inference.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import benchutil
import torch
from benchutil import add_device_argument, device_info, device_label, peak_gpu_mb, peak_rss_mb, resolve_device, sync

ROOT = benchutil.use_checkout_src()

from gsr_train.features.structure import node_features  # noqa: E402
from gsr_train.features.triple_batch import make_batch  # noqa: E402
from gsr_train.io import write_json  # noqa: E402
from gsr_train.kg.index import SplitGraphs  # noqa: E402
from gsr_train.models.subgraphrag.perf import keep_freed_memory  # noqa: E402
from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer  # noqa: E402
from gsr_train.models.subgraphrag.serving import CompiledQuestionScorer  # noqa: E402
from gsr_train.retrievers.subgraphrag import top_k_per_question, usable_cores  # noqa: E402

VARIANTS = {  # scorer options over --hidden (model configs: subgraphrag_paper, subgraphrag, subgraphrag_wide)
    "paper": {},
    "ours": {"cos_features": True, "qr_product": True, "hidden": 256},
    "ours_wide": {"cos_features": True, "qr_product": True},
}


def synthetic_split(
    questions: int,
    triples: int,
    entities: int,
    relations_per_q: int,
    num_entities: int,
    num_relations: int,
    seed: int = 0,
) -> SplitGraphs:
    """Random graphs of WebQSP size over a shared vocabulary (topic = local node 0)."""
    g = torch.Generator().manual_seed(seed)
    ent_ids, edges, rels = [], [], []
    for _ in range(questions):
        ent_ids.append(torch.randperm(num_entities, generator=g)[:entities])
        head = torch.randint(0, entities, (triples,), generator=g)
        head[: triples // 10] = 0  # a topic hub, as in real graphs
        edges.append(torch.stack([head, torch.randint(0, entities, (triples,), generator=g)]))
        pool = torch.randperm(num_relations, generator=g)[:relations_per_q]
        rels.append(pool[torch.randint(0, relations_per_q, (triples,), generator=g)])
    topic = torch.zeros(questions * entities, dtype=torch.bool)
    topic[::entities] = True
    return SplitGraphs(
        ids=[f"q{i}" for i in range(questions)],
        questions=[""] * questions,
        answers=[[]] * questions,
        ent_ptr=torch.arange(questions + 1) * entities,
        entity_ids=torch.cat(ent_ids),
        topic_mask=topic,
        answer_mask=torch.zeros(questions * entities, dtype=torch.bool),
        edge_ptr=torch.arange(questions + 1) * triples,
        edge_index=torch.cat(edges, 1),
        edge_rel=torch.cat(rels),
    )


DEVICE = torch.device("cpu")  # --device


def timeit(fn, repeats: int) -> float:
    """Median seconds of ``fn`` after a warm-up, the device synchronised around each call."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync(DEVICE)
        t0 = time.perf_counter()
        fn()
        sync(DEVICE)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def part1(args) -> dict:
    dim, hidden = args.dim, args.hidden
    split = synthetic_split(
        args.questions, args.triples, args.entities, args.relations_per_q, args.vocab, args.relation_vocab
    )
    g = torch.Generator().manual_seed(1)
    ent = torch.nn.functional.normalize(torch.randn(args.vocab, dim, generator=g), dim=-1)
    has = torch.rand(args.vocab, generator=g) > 0.3
    ent[~has] = 0
    rel = torch.nn.functional.normalize(torch.randn(args.relation_vocab, dim, generator=g), dim=-1)
    qemb = torch.nn.functional.normalize(torch.randn(args.questions, dim, generator=g), dim=-1)
    cuda = DEVICE.type == "cuda"  # the tables stay on the CPU, as a run's memory-mapped ones do
    total = int(split.edge_ptr[-1])
    out = {
        "graphs": args.questions,
        "triples_per_graph": args.triples,
        "entities_per_graph": args.entities,
        "dim": dim,
        "hidden": hidden,
        "graphs_per_call": args.graphs_per_call,
        "variants": {},
    }
    for name, opts in VARIANTS.items():
        torch.manual_seed(0)
        scorer = TripleScorer(ScorerConfig.from_options({"hidden": hidden, **opts}, dim)).eval().to(DEVICE)
        feats = node_features(split)
        chunks = [
            list(range(s, min(s + args.graphs_per_call, len(split))))
            for s in range(0, len(split), args.graphs_per_call)
        ]
        local = [make_batch(split, c, feats, qemb, ent, has, rel).to(DEVICE) for c in chunks]
        glob = [make_batch(split, c, feats, qemb, ent, has, rel, global_ids=True).to(DEVICE) for c in chunks]
        sync(DEVICE)
        t0 = time.perf_counter()
        proj = scorer.precompute(ent, has, rel)
        sync(DEVICE)
        precompute_s = time.perf_counter() - t0
        diff = max(
            float((scorer.forward_reference(b) - scorer.forward_projected(proj, gb)).abs().max())
            for b, gb in zip(local, glob)
        )
        t_ref = timeit(lambda: [scorer.forward_reference(b) for b in local], args.repeats)
        t_fast = timeit(lambda: [scorer.forward_projected(proj, b) for b in glob], args.repeats)
        t_comp = diff_c = None
        if not cuda:  # the compiled kernels are CPU code
            compiled = CompiledQuestionScorer(scorer, proj, rel)
            reference = torch.cat([scorer.forward_reference(b) for b in local])
            diff_c = float((compiled.score_split(split, qemb) - reference).abs().max())
            t_comp = timeit(lambda: compiled.score_split(split, qemb), args.repeats)
        row = {
            "hidden": scorer.config.hidden,
            "straightforward_triples_per_s": total / t_ref,
            "projected_triples_per_s": total / t_fast,
            "speedup": t_ref / t_fast,
            "max_abs_diff": diff,
            "precompute_s": precompute_s,
            "projected_entities": args.vocab,
            "straightforward_s": t_ref,
            "projected_s": t_fast,
            "compiled_triples_per_s": None if t_comp is None else total / t_comp,
            "compiled_speedup": None if t_comp is None else t_ref / t_comp,
            "compiled_max_abs_diff": diff_c,
            "compiled_s": t_comp,
        }
        if args.fused:
            fused_cfg = ScorerConfig.from_options({"hidden": hidden, **opts, "fused": True}, dim)
            fused = TripleScorer(fused_cfg).eval().to(DEVICE)
            fused.load_state_dict(scorer.state_dict())
            t_fused = timeit(lambda: [fused.forward_projected(proj, b) for b in glob], args.repeats)
            row.update(
                fused_triples_per_s=total / t_fused,
                fused_speedup=t_ref / t_fused,
                fused_max_abs_diff=max(
                    float((fused.forward_projected(proj, gb) - scorer.forward_reference(b)).abs().max())
                    for b, gb in zip(local, glob)
                ),
            )
        out["variants"][name] = row
    return out


@torch.no_grad()
def part2(args) -> dict:
    from gsr_train.kg.index import get_index
    from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever
    from gsr_train.text.embeddings import get_embeddings

    data = Path(args.data)
    if not (data / "test.jsonl.gz").exists():
        return {"skipped": f"{data} not found"}
    index = get_index(data, cache_dir=args.cache)
    emb = get_embeddings(index, args.encoder, args.cache, splits=["test"])
    split, qemb = index["test"], emb.question["test"]
    out = {
        "data": str(data),
        "questions": len(split),
        "triples": int(split.edge_ptr[-1]),
        "passes": args.passes,
        "variants": {},
    }
    for name, opts in VARIANTS.items():
        if args.checkpoint and name == "ours":
            scorer = SubgraphRAGRetriever.from_checkpoint(args.checkpoint).scorer
            name = f"checkpoint:{Path(args.checkpoint).name}"
        else:
            torch.manual_seed(0)
            scorer = TripleScorer(ScorerConfig.from_options({"hidden": args.hidden, **opts}, emb.dim))
        if DEVICE.type == "cuda":  # the compiled kernels are CPU code: the torch path alone
            modes = {"torch": SubgraphRAGRetriever(scorer, DEVICE, serving="torch")}
        else:
            modes = {
                "compiled": SubgraphRAGRetriever(scorer, serving="compiled", workers=1),
                "torch": SubgraphRAGRetriever(scorer, serving="torch"),
            }
        if args.workers > 1 and DEVICE.type == "cpu":  # batched only: the split spread over worker threads
            modes[f"compiled, {args.workers} workers"] = SubgraphRAGRetriever(
                scorer, serving="compiled", workers=args.workers
            )
        if args.fused:
            fused = TripleScorer(scorer.config, fused=True).eval()
            fused.load_state_dict(scorer.state_dict())
            modes["torch fused"] = SubgraphRAGRetriever(fused, DEVICE, serving="torch")
        precompute_s = {}
        for mode, retriever in modes.items():
            t0 = time.perf_counter()
            retriever.projections(emb)
            precompute_s[mode] = time.perf_counter() - t0

        def one(retriever, q: int) -> torch.Tensor:  # what serving one question costs
            scores = retriever.score_question(split.graph(q), qemb[q], emb)
            top = scores.topk(min(args.k, scores.numel())).indices
            sync(DEVICE)
            return top

        for retriever in modes.values():
            for q in range(min(5, len(split))):
                one(retriever, q)  # warm-up (kernel compilation / loading, torch.compile)
        # passes over all questions, the modes alternating, so that both see the same machine
        per_pass = {mode: [] for mode in modes}
        per_q = {mode: [] for mode in modes}
        cpu = {mode: 0.0 for mode in modes}
        one_modes = [m for m in modes if "workers" not in m]
        for _ in range(args.passes):
            for mode in one_modes:
                retriever = modes[mode]
                times, c0 = [], time.process_time()
                for q in range(len(split)):
                    t0 = time.perf_counter()
                    one(retriever, q)
                    times.append(time.perf_counter() - t0)
                cpu[mode] += time.process_time() - c0
                per_pass[mode].append(statistics.mean(times))
                per_q[mode] += times
        for mode, retriever in modes.items():
            t_batched = timeit(
                lambda: top_k_per_question(
                    retriever.score_split(split, qemb, emb, graphs_per_batch=args.eval_batch), split.edge_ptr, args.k
                ),
                args.repeats,
            )
            row = {
                "serving": mode,
                "ms_per_question_batched": 1e3 * t_batched / len(split),
                "triples_per_s_batched": int(split.edge_ptr[-1]) / t_batched,
                "precompute_s": precompute_s[mode],
                "batched_s": t_batched,
            }
            if per_pass[mode]:
                row.update(
                    {
                        "ms_per_question_one_at_a_time": 1e3 * statistics.median(per_pass[mode]),
                        "ms_per_question_best_pass": 1e3 * min(per_pass[mode]),
                        "ms_per_question_passes": [1e3 * t for t in per_pass[mode]],
                        "cpu_ms_per_question_one_at_a_time": 1e3 * cpu[mode] / (args.passes * len(split)),
                        "ms_per_question_median": 1e3 * statistics.median(per_q[mode]),
                        "ms_per_question_p90": 1e3 * statistics.quantiles(per_q[mode], n=10)[-1],
                        "one_at_a_time_speedup_vs_torch": statistics.median(per_pass["torch"])
                        / statistics.median(per_pass[mode]),
                    }
                )
            out["variants"][f"{name} [{mode}]"] = row
        torch_batched = out["variants"][f"{name} [torch]"]["batched_s"]
        for mode in modes:
            row = out["variants"][f"{name} [{mode}]"]
            row["batched_speedup_vs_torch"] = torch_batched / row["batched_s"]
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--triples", type=int, default=4300)
    p.add_argument("--entities", type=int, default=1500)
    p.add_argument("--relations-per-q", type=int, default=150)
    p.add_argument("--vocab", type=int, default=40000)
    p.add_argument("--relation-vocab", type=int, default=6000)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--graphs-per-call", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fused", action="store_true", help="also time the torch.compile'd per-triple stage")
    benchutil.add_fixture_arguments(p)
    p.add_argument(
        "--checkpoint", default=None, help="a trained SubgraphRAG .ckpt for part 2 (default: random weights)"
    )
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--eval-batch", type=int, default=128)
    p.add_argument(
        "--workers",
        type=int,
        default=usable_cores(),
        help="worker threads of the extra batched compiled row (default: the usable cores)",
    )
    p.add_argument(
        "--passes", type=int, default=5, help="passes over webqsp_mini test per serving mode (median reported)"
    )
    p.add_argument("--encoder", default="minilm", help="minilm (the default) or hashing (no model to install)")
    add_device_argument(p)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_subgraphrag_inference.json"))
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = resolve_device(args.device)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    if DEVICE.type == "cuda":
        torch.set_float32_matmul_precision("high")  # what a run does on CUDA (float32_matmul_precision: null)
    result = {"machine": device_info(DEVICE)}
    # the latency part first: part 1's straightforward passes allocate hundreds of MB that
    # would otherwise be measured as part of the heap state part 2 runs in
    result["webqsp_mini_retrieval"] = part2(args)
    result["webqsp_sized_random"] = part1(args)

    r1 = result["webqsp_sized_random"]
    print(
        f"\nTriples scored per second, WebQSP-sized random graphs ({r1['graphs']} x {r1['triples_per_graph']} "
        f"triples, {r1['entities_per_graph']} entities, {r1['dim']}-d, "
        f"on {device_label(result['machine'])}); speed-ups against the straightforward pass, same run"
    )
    print(
        "| model | hidden | straightforward | precomputed (torch) | speed-up | compiled kernels | speed-up | "
        "fused | fused speed-up | max abs diff torch / compiled |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in r1["variants"].items():
        fused = (
            f"{row['fused_triples_per_s']:,.0f} | {row['fused_speedup']:.1f}x"
            if "fused_triples_per_s" in row
            else "- | -"
        )
        compiled = (
            f"{row['compiled_triples_per_s']:,.0f} | {row['compiled_speedup']:.1f}x"
            if row["compiled_s"] is not None
            else "- | -"
        )
        diff_c = "-" if row["compiled_max_abs_diff"] is None else f"{row['compiled_max_abs_diff']:.1e}"
        print(
            f"| {name} | {row['hidden']} | {row['straightforward_triples_per_s']:,.0f} | "
            f"{row['projected_triples_per_s']:,.0f} | {row['speedup']:.1f}x | {compiled} | {fused} | "
            f"{row['max_abs_diff']:.1e} / {diff_c} |"
        )
    r2 = result["webqsp_mini_retrieval"]
    if "variants" in r2:
        print(
            f"\nRetrieval time per question, webqsp_mini test ({r2['questions']} questions, {r2['triples']} triples; "
            f"DDE + scoring + top-{args.k}, embeddings cached, projections precomputed once; "
            f"one at a time: median over {r2['passes']} passes of the mean, modes alternating)"
        )
        print(
            "| model [serving] | one at a time: mean ms | best pass ms | process CPU ms | median ms | p90 ms | "
            "speed-up vs torch | batched ms/question | batched triples/s | batched speed-up vs torch | precompute s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, row in r2["variants"].items():
            one = (
                f"{row['ms_per_question_one_at_a_time']:.3f} | {row['ms_per_question_best_pass']:.3f} | "
                f"{row['cpu_ms_per_question_one_at_a_time']:.3f} | {row['ms_per_question_median']:.3f} | "
                f"{row['ms_per_question_p90']:.3f} | {row['one_at_a_time_speedup_vs_torch']:.1f}x"
                if "ms_per_question_one_at_a_time" in row
                else "- | - | - | - | - | -"
            )
            print(
                f"| {name} | {one} | {row['ms_per_question_batched']:.3f} | {row['triples_per_s_batched']:,.0f} | "
                f"{row['batched_speedup_vs_torch']:.1f}x | {row['precompute_s']:.2f} |"
            )
    else:
        print(f"\nwebqsp_mini part skipped: {r2.get('skipped')}")
    result["peak_rss_mb"], result["peak_gpu_mb"] = peak_rss_mb(), peak_gpu_mb(DEVICE)
    print(f"\npeak RSS {result['peak_rss_mb'] / 1024:.2f} GB; peak GPU memory {result['peak_gpu_mb'] or '-'} MB")
    write_json(args.out, result)
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
