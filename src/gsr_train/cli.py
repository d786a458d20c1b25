"""``gsr-train``: one command line for everything but training (``python train.py``) and evaluating
runs (``python eval.py``), the two Hydra entry points.

gsr-train build-index | supervision | embed | make-synthetic      prepare data (--help on each)
gsr-train llm-label-triples | llm-pseudo-questions | llm-select-chains | llm-open-questions
          | serve-llm                                             LLM data steps
gsr-train score --results F --data D                              score any results file
gsr-train cosine --data D                                         the cosine baseline on any data
gsr-train reader score PREDICTIONS | compare-patterns | robustness | robustness-render | gsr-table
gsr-train export RUN_DIR|CKPT|MODEL_DIR OUT_DIR [--kind subgraphrag|gsr|reader] [--repo-id ORG/NAME]
gsr-train publish OUT_DIR --repo-id ORG/NAME [--dry-run] [--private] [--token-env HF_TOKEN]
gsr-train aggregate SWEEP_DIR [--no-write]
gsr-train compare RUN_A RUN_B                                     paired differences of two runs, with intervals
gsr-train options [NAME [key=value ...]] [--write-defaults]       an experiment's options, described
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

from gsr_train.data.errors import USER_ERROR_EXIT, folder_write_error, user_error_message
from gsr_train.runtime import quiet


def _export(a: argparse.Namespace) -> int:
    # lazy: a verb imports only what it runs (gsr-train --help answers in 0.04 s)
    from gsr_train.export.exporters import export_model

    try:
        info = export_model(a.source, a.out, kind=a.kind, repo_id=a.repo_id)
    except OSError as e:  # a read-only or full disk is the user's to fix, not a traceback
        error = folder_write_error(e, Path(a.out).parent, "the exported model", "choose a writable OUT_DIR")
        if error is None:
            raise
        raise error from e
    print(f"exported {info['kind']} model from {info['source']} to {a.out}")
    for name in info["files"]:
        print(f"  {name}")
    if info.get("metrics"):
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in list(info["metrics"].items())[:8]))
    return 0


def _publish(a: argparse.Namespace) -> int:
    # lazy: a verb imports only what it runs (gsr-train --help answers in 0.04 s)
    from gsr_train.export.publish import publish

    publish(a.folder, a.repo_id, private=a.private, dry_run=a.dry_run, token_env=a.token_env, commit_message=a.message)
    return 0


def _aggregate(a: argparse.Namespace) -> int:
    # lazy: a verb imports only what it runs (gsr-train --help answers in 0.04 s)
    from gsr_train.eval.aggregate import aggregate

    if not Path(a.root).is_dir():
        raise FileNotFoundError(f"{a.root}: no such folder (give a multirun folder or a folder of run folders)")
    rows = aggregate(a.root, write=not a.no_write)
    if not rows:
        raise FileNotFoundError(f"no run results under {a.root} (no run folder with a metrics.json there yet)")
    if not a.no_write:
        print(f"\nwrote {a.root}/aggregate.csv and aggregate.md ({len(rows)} rows)")
    return 0


# verbs whose module has its own command line (argparse, or a Hydra app for the LLM steps): the
# arguments after the verb go to that module's ``main`` unchanged
DELEGATED = {
    "build-index": ("gsr_train.commands.build_index", "build or verify the KG index of a dataset (resumable)"),
    "supervision": ("gsr_train.commands.build_supervision", "shortest-path supervision of every split"),
    "embed": ("gsr_train.commands.embed", "embed entities, relations and questions once (resumable)"),
    "make-synthetic": ("gsr_train.commands.make_synthetic", "write the embedded synthetic benchmark"),
    "llm-label-triples": ("gsr_train.commands.llm_label_triples", "LLM relevance labels (Hydra options)"),
    "llm-pseudo-questions": ("gsr_train.commands.llm_pseudo_questions", "LLM pseudo questions (Hydra options)"),
    "llm-select-chains": ("gsr_train.commands.llm_select_chains", "LLM-filtered chains (Hydra options)"),
    "llm-open-questions": ("gsr_train.commands.llm_open_questions", "LLM open-ended questions (Hydra options)"),
    "serve-llm": ("gsr_train.llm.serve", "serve a local GGUF model behind an OpenAI-compatible API"),
    "score": ("gsr_train.eval.evaluate", "QA scoreboard of prediction files (score FILE...), or --results recall"),
    "cosine": ("gsr_train.retrievers.cosine", "the cosine baseline on any data, outside a run folder"),
    "reader": ("gsr_train.commands.reader_score", "re-score a readers' predictions file (reader score FILE)"),
    "compare-patterns": ("gsr_train.commands.compare_patterns", "SimGRAG / SAFE pattern sources side by side"),
    "robustness": ("gsr_train.commands.robustness", "the robustness study outside train.py"),
    "robustness-render": ("gsr_train.robustness.run", "redraw a robustness run's tables and plots"),
    "gsr-table": ("gsr_train.commands.gsr_table", "one GSR table over run folders (a multirun)"),
    "compare": ("gsr_train.commands.compare", "two runs on their shared questions: differences, intervals, p"),
    "options": ("gsr_train.commands.options", "every option of an experiment: value, type, range, description"),
}


def delegate(verb: str, rest: list[str]) -> int:
    """Run ``verb``'s module as if it were called with ``rest``: its own parser reads ``sys.argv``."""
    module = importlib.import_module(DELEGATED[verb][0])
    saved = sys.argv
    sys.argv = [f"gsr-train {verb}", *rest]
    try:
        result = module.main()
    except Exception as e:  # a verb without its own error line: the same one as the others
        message = user_error_message(e, extra=VERB_ERRORS)
        if message is None:
            raise
        print(f"error: gsr-train {verb}: {message}", file=sys.stderr)
        return USER_ERROR_EXIT
    finally:
        sys.argv = saved
    return result if isinstance(result, int) else 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gsr-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for verb, (_, what) in DELEGATED.items():
        sub.add_parser(verb, help=what, add_help=False)

    e = sub.add_parser("export", help="export a trained model to a Hugging Face folder with a model card")
    e.add_argument("source", help="run folder, Lightning .ckpt, GSR model folder or peft adapter folder")
    e.add_argument("out", help="output folder (replaced atomically)")
    e.add_argument("--kind", choices=["subgraphrag", "gsr", "reader"], default=None, help="default: detected")
    e.add_argument("--repo-id", default=None, help="Hub name the card's loading snippet uses")
    e.set_defaults(fn=_export)

    p = sub.add_parser("publish", help="upload an exported folder to the Hugging Face Hub")
    p.add_argument("folder")
    p.add_argument("--repo-id", required=True, help="ORG/NAME")
    p.add_argument("--private", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print the files and the model card; upload nothing")
    p.add_argument("--token-env", default="HF_TOKEN", help="environment variable holding the token")
    p.add_argument("--message", default=None, help="commit message")
    p.set_defaults(fn=_publish)

    g = sub.add_parser("aggregate", help="one results table (CSV + Markdown) across the runs of a sweep")
    g.add_argument("root", help="multirun folder (or any folder of run folders)")
    g.add_argument("--no-write", action="store_true", help="print only")
    g.set_defaults(fn=_aggregate)
    return ap


# what the verbs raise for a wrong path or option (export, publish and aggregate name the file or value)
VERB_ERRORS = (FileNotFoundError, NotADirectoryError, ValueError, RuntimeError)


def main(argv: list[str] | None = None) -> int:
    """Run a verb; a user's error is one line, ``error: gsr-train VERB: ...``, and exit status 2
    (the format of train.py's errors: :mod:`gsr_train.data.errors`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet.install()  # no third-party tips, deprecations or progress bars in the output
    if argv and argv[0] in DELEGATED:
        return delegate(argv[0], argv[1:])
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except Exception as e:
        message = user_error_message(e, extra=VERB_ERRORS)
        if message is None:
            raise
        print(f"error: gsr-train {args.command}: {message}", file=sys.stderr)
        return USER_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(main())
