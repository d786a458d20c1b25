"""``gsr-train VERB``: one command line (typer) for everything but training and evaluating runs
(``python train.py``, ``python eval.py``, the two Hydra entry points).

Each verb is a typed function in its own module (`gsr_train.clikit`), loaded only when it
runs or prints its help: ``gsr-train --help`` imports neither torch nor any verb. The Hydra verbs
(``llm-*``, ``robustness``) take ``key=value`` overrides of their config, as train.py does.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup

from gsr_train.clikit import SETTINGS, USAGE_EXIT, command, one_line
from gsr_train.runtime import quiet, shutdown


class Verb(NamedTuple):
    module: str
    about: str  # the one line of ``gsr-train --help``
    function: str = "command"  # the typed function (or a typer.Typer of sub-verbs)
    config: str | None = None  # a Hydra verb: its config under conf/; its arguments are overrides
    doc: str | None = None  # a Hydra verb: the module whose docstring is its help (default: ``module``)


def llm_step(step: str, about: str) -> Verb:
    """An LLM data step: one entry (`gsr_train.commands.llm_step`), its own config and help."""
    return Verb("gsr_train.commands.llm_step", about, config=f"prep/llm_{step}", doc=f"gsr_train.llm.steps.{step}")


VERBS = {
    "build-index": Verb("gsr_train.commands.build_index", "build or verify the KG index of a dataset (resumable)"),
    "supervision": Verb("gsr_train.commands.build_supervision", "shortest-path supervision of every split"),
    "embed": Verb("gsr_train.commands.embed", "embed entities, relations and questions once (resumable)"),
    "make-synthetic": Verb("gsr_train.commands.make_synthetic", "write the embedded synthetic benchmark"),
    "ask": Verb("gsr_train.commands.ask", "ask a trained SubgraphRAG run one question over a KG store or endpoint"),
    "link": Verb("gsr_train.commands.link", "link questions to a KG store's entities; topic-entity recall@1 / @5"),
    "import-kg": Verb("gsr_train.commands.import_kg", "import a KG file (TSV, CSV, N-Triples, parquet) into a store"),
    "serve-kg": Verb("gsr_train.commands.serve_kg", "serve RDF files from a local Virtuoso over SPARQL (data.kg=URL)"),
    "llm-label-triples": llm_step("label_triples", "LLM relevance labels of retrieved triples"),
    "llm-pseudo-questions": llm_step("pseudo_questions", "LLM pseudo questions for chains"),
    "llm-select-chains": llm_step("select_chains", "LLM-filtered relation chains"),
    "llm-open-questions": llm_step("open_questions", "LLM open-ended questions"),
    "serve-llm": Verb("gsr_train.commands.serve_llm", "serve a local model behind an OpenAI-compatible API"),
    "score": Verb("gsr_train.commands.score", "QA scoreboard of prediction files of any system"),
    "recall": Verb("gsr_train.commands.recall", "triple and answer recall@K of a retrieval results file"),
    "cosine": Verb("gsr_train.commands.cosine", "the cosine baseline on any data, outside a run folder"),
    "reader": Verb("gsr_train.commands.reader_score", "re-score a reader run's predictions (reader score FILE)", "app"),
    "compare-patterns": Verb("gsr_train.commands.compare_patterns", "SimGRAG / SAFE pattern sources side by side"),
    "robustness": Verb("gsr_train.commands.robustness", "the robustness study outside train.py", config="config"),
    "robustness-render": Verb("gsr_train.commands.robustness_render", "redraw a robustness run's tables and plots"),
    "gsr-table": Verb("gsr_train.commands.gsr_table", "one GSR table over run folders (a multirun)"),
    "compare": Verb("gsr_train.commands.compare", "two runs on their shared questions: differences, intervals, p"),
    "explore": Verb("gsr_train.commands.explore", "a run's questions one by one in the browser (one HTML page)"),
    "aggregate": Verb("gsr_train.commands.aggregate", "one results table (CSV + Markdown) across a sweep's runs"),
    "export": Verb("gsr_train.commands.export", "export a trained model to a Hugging Face folder with a card"),
    "publish": Verb("gsr_train.commands.export", "upload an exported folder to the Hugging Face Hub", "publish"),
    "options": Verb("gsr_train.commands.options", "every option of an experiment: value, type, range, description"),
}


def load(name: str) -> Any:
    """The click command of the verb ``name`` (its module imported now)."""
    verb = VERBS[name]
    if verb.config is not None:
        return hydra_command(name, verb)
    found = getattr(importlib.import_module(verb.module), verb.function)
    if isinstance(found, typer.Typer):  # a verb of sub-verbs (reader score)
        found.info.name = name
        return typer.main.get_group(found)
    return command(found, name)


def hydra_command(name: str, verb: Verb) -> Any:
    """A Hydra verb: its arguments go to Hydra unchanged; ``--help`` is its own short help."""
    settings = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}
    return HydraVerb(name, verb, help=verb.about, context_settings=settings, add_help_option=False)


class HydraVerb(TyperCommand):
    """A verb whose arguments are Hydra overrides (``key=value``, ``-m``, ``--cfg job``), passed on as typed."""

    def __init__(self, name: str, verb: Verb, **settings: Any):
        super().__init__(name, **settings)
        self.verb = verb

    def invoke(self, ctx: Any) -> Any:
        args = list(ctx.args)
        if {"-h", "--help"} & set(args):
            from gsr_train.options.help import hydra_verb_help

            doc = module_docstring(self.verb.doc or self.verb.module) or self.verb.about
            print(hydra_verb_help(f"gsr-train {self.name}", doc, str(self.verb.config)))
            return 0
        return importlib.import_module(self.verb.module).main(args, config=self.verb.config)


def module_docstring(module: str) -> str | None:
    """A module's docstring read from its source, without importing it (a verb's module may import
    torch; its help must not wait for that)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))


class Verbs(TyperGroup):
    """The verbs, listed from `VERBS` without importing them; one is loaded when it runs."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        verb = VERBS.get(cmd_name)
        return None if verb is None else TyperCommand(cmd_name, help=verb.about, short_help=verb.about)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, _, rest = super().resolve_command(ctx, args)
        return name, load(str(name)), rest


def app() -> Any:
    """The ``gsr-train`` command (a click group)."""
    return Verbs(
        name="gsr-train",
        help=(
            "One command line for everything but training and evaluating runs (python train.py "
            "+experiment=NAME, python eval.py ckpt_path=RUN). gsr-train VERB --help: a verb's options."
        ),
        context_settings=SETTINGS,
        rich_markup_mode=None,
    )


def reference() -> str:
    """docs/reference/cli.md: every verb's ``--help``, as the CLI prints it (tools/write_cli_reference.py
    writes it; a test keeps it current)."""
    import contextlib
    import io

    def shown(*args: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main([*args, "--help"])
        return out.getvalue().rstrip()

    verbs = [[name] for name in VERBS] + [["reader", "score"]]
    lines = [
        "# `gsr-train` command line",
        "",
        "<!-- generated from the CLI itself by tools/write_cli_reference.py: do not edit -->",
        "",
        "`gsr-train VERB --help` prints each section below. Training and evaluating runs are",
        "`python train.py +experiment=NAME` and `python eval.py ckpt_path=RUN` (`python train.py --help`",
        "lists the experiments). Options are spelled as in the configs (`--top_k`, `--cache_dir`); the",
        "Hydra verbs (`llm-*`, `robustness`) take `key=value` overrides (`data.dir=...`).",
        "",
        "| verb | what it does |",
        "|---|---|",
        *(f"| [`{n}`](#gsr-train-{n}) | {v.about} |" for n, v in VERBS.items()),
        "",
        "```text",
        shown(),
        "```",
    ]
    for words in verbs:
        lines += ["", f"## gsr-train {' '.join(words)}", "", "```text", shown(*words), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run a verb; a user's error is one line, ``error: gsr-train VERB: ...``, and exit status 2
    (the format of train.py's errors: `gsr_train.data.errors`)."""
    args = (sys.argv[1:] if argv is None else list(argv)) or ["--help"]  # no verb: the list of verbs
    quiet.install()  # no third-party tips, deprecations or progress bars in the output
    shutdown.install()  # no last garbage collection at exit (2.5 s with torch loaded)
    verb = next((a for a in args if not a.startswith("-")), "")
    try:
        result = app().main(args, prog_name="gsr-train", standalone_mode=False)
    except typer.Exit as e:  # --help
        return int(e.exit_code)
    except typer.TyperException as e:  # a refused command line (click's usage errors)
        print(f"error: gsr-train{' ' + verb if verb in VERBS else ''}: {one_line(e)}", file=sys.stderr)
        return USAGE_EXIT
    except Exception as e:
        from gsr_train.commands import verb_error  # lazy: --help stays free of Hydra and torch

        return verb_error(e, f"gsr-train {verb}")
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
