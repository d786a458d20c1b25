"""``gsr-train options [NAME [key=value ...]]``: every option of an experiment, as train.py would
compose it, with its value (and default where they differ), type, range and one-line description.

``gsr-train options`` lists the experiments; ``gsr-train options --write_defaults`` writes the
``conf/recipes/*_defaults.yaml`` files from the option dataclasses (the one source of defaults);
``gsr-train options --write_docs [PATH]`` writes the reference page of every option of every experiment
(docs/reference/options.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from hydra.errors import ConfigCompositionException, OverrideParseException

from gsr_train.commands import run
from gsr_train.config import project_root
from gsr_train.data.errors import UserError
from gsr_train.options.command_line import compose_config, composition_error
from gsr_train.options.describe import describe, write_defaults
from gsr_train.options.help import experiment_lines
from gsr_train.options.reference import PAGE, write_page


def command(
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="an experiment (conf/experiment/NAME.yaml); none: list them")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(metavar="KEY=VALUE...", help="key=value overrides as on train.py's command line (model=...)"),
    ] = None,
    write_defaults_: Annotated[
        bool, typer.Option("--write_defaults", help="write the *_defaults.yaml files from the option dataclasses")
    ] = False,
    write_docs: Annotated[
        bool, typer.Option("--write_docs", help=f"write the options reference page (at NAME if given, else {PAGE})")
    ] = False,
) -> int:
    """Every option of an experiment, as train.py composes it: value (and default where they
    differ), type, range and description. Without NAME: the experiments."""
    if write_docs:
        path = Path(name) if name else project_root() / PAGE
        print(f"wrote {path}" if write_page(path) else f"{path} is current")
        return 0
    if write_defaults_:
        written = write_defaults()
        print("\n".join(f"wrote {p}" for p in written) or "every defaults file is current")
        return 0
    if not name:
        print("experiments (gsr-train options NAME prints one's options):\n" + experiment_lines())
        return 0
    given = [f"+experiment={name}", *(overrides or [])]
    conf = project_root() / "conf"
    try:
        cfg = compose_config(conf, "config", given)
    except (ConfigCompositionException, OverrideParseException) as err:
        raise UserError(composition_error(err, given, conf, "config")) from None
    print(describe(cfg, name))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(command, argv, "gsr-train options")


if __name__ == "__main__":
    raise SystemExit(main())
