"""``gsr-train options [NAME [key=value ...]]``: every option of an experiment, as train.py would
compose it, with its value (and default where they differ), type, range and one-line description.

``gsr-train options`` lists the experiments; ``gsr-train options --write-defaults`` writes the
``conf/experiment/*_defaults.yaml`` files from the option dataclasses (the one source of defaults);
``gsr-train options --write-docs [PATH]`` writes the reference page of every option of every experiment
(docs/reference/options.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra.errors import ConfigCompositionException, OverrideParseException

from gsr_train.config import project_root
from gsr_train.data.errors import UserError
from gsr_train.options.command_line import compose_config, composition_error
from gsr_train.options.describe import describe, write_defaults
from gsr_train.options.help import experiments
from gsr_train.options.reference import PAGE, write_page


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gsr-train options", description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("name", nargs="?", help="an experiment (conf/experiment/NAME.yaml); none: list them")
    ap.add_argument("overrides", nargs="*", help="key=value overrides as on train.py's command line (model=...)")
    ap.add_argument("--write-defaults", action="store_true", help="write conf/experiment/*_defaults.yaml")
    ap.add_argument(
        "--write-docs", nargs="?", const="", metavar="PATH", help=f"write the options reference page (default {PAGE})"
    )
    args = ap.parse_args(argv)
    if args.write_docs is not None:
        path = Path(args.write_docs) if args.write_docs else project_root() / PAGE
        print(f"wrote {path}" if write_page(path) else f"{path} is current")
        return 0
    if args.write_defaults:
        written = write_defaults()
        print("\n".join(f"wrote {p}" for p in written) or "every defaults file is current")
        return 0
    if not args.name:
        print("experiments (gsr-train options NAME prints one's options):\n  " + "\n  ".join(experiments()))
        return 0
    overrides = [f"+experiment={args.name}", *args.overrides]
    conf = project_root() / "conf"
    try:
        cfg = compose_config(conf, "config", overrides)
    except (ConfigCompositionException, OverrideParseException) as err:
        raise UserError(composition_error(err, overrides, conf, "config")) from None
    print(describe(cfg, args.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
