"""Hydra's own refusals of a command line as one line and exit 2, like every other config mistake.

Hydra composes the config before any of our code runs and refuses three mistakes there, each in
several lines and exit 1: a key the config lacks typed without ``+`` (``model.hiden=64``: "Key
'hiden' is not in struct"), a group option that does not exist (``data=nosuch``) and an override
it cannot parse. `run_hydra` runs a ``@hydra.main`` function (train.py, eval.py, gsr-train
robustness) so that these errors reach it instead (``HYDRA_FULL_ERROR`` while Hydra composes;
`OptionErrors` checks the composed config before Hydra makes the run folder
and gives Hydra its own report back once the job starts), and prints each as one
line: a missing key is composed once more as ``+key=value`` and named by the recipe check
(`gsr_train.options.check`: the section's file, the closest option), a missing group option
with the group's choices.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from gsr_train.data.errors import USER_ERROR_EXIT, user_error_exit
from gsr_train.options.check import RecipeError, check_recipe, config_errors
from gsr_train.options.eval_config import check_eval_source
from gsr_train.options.help import help_template
from gsr_train.options.inputs import check_inputs
from gsr_train.options.sweep_points import check_sweep_points
from gsr_train.runtime import quiet, shutdown

GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
FULL_ERROR = "HYDRA_FULL_ERROR"  # set: Hydra raises its errors instead of printing them
_SET_HERE: list[bool] = []  # whether run_hydra set FULL_ERROR (and JobStarted should unset it)


def run_hydra(
    main: Callable[[], Any], config_dir: str | Path, config_name: str, overrides: Sequence[str] | None = None
) -> Any:
    """``main()``, a ``@hydra.main`` function of ``config_dir/config_name`` (or any call that runs
    Hydra on ``overrides``, default: this process's command line); a mistake Hydra finds while
    composing the config is ``error: <one line>`` on stderr and exit status 2.

    A user who sets ``HYDRA_FULL_ERROR`` gets Hydra's full report, as Hydra documents."""
    quiet.install()  # no third-party tips, deprecations or progress bars in the output
    shutdown.install()  # no last garbage collection at exit (2.5 s with torch loaded)
    register_help()
    marked = byte_order_marked(_overrides() if overrides is None else list(overrides), Path(config_dir))
    if marked is not None:
        print(
            f"error: {marked} starts with a UTF-8 byte order mark, which hides its '# @package' line from "
            "Hydra; save it as UTF-8 without a BOM",
            file=sys.stderr,
        )
        raise SystemExit(USER_ERROR_EXIT)
    if FULL_ERROR in os.environ:
        return main()
    os.environ[FULL_ERROR] = "1"
    _SET_HERE.append(True)
    try:
        return main()
    except (ConfigCompositionException, OverrideParseException) as err:
        given = _overrides() if overrides is None else list(overrides)
        print(f"error: {composition_error(err, given, Path(config_dir), config_name)}", file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT) from None
    finally:
        _restore()


def _restore() -> None:
    if _SET_HERE:
        _SET_HERE.clear()
        os.environ.pop(FULL_ERROR, None)


class OptionErrors(Callback):
    """Hydra callback (conf/config.yaml, listed first): a train.py config is checked against its
    recipe as soon as Hydra has composed it, before Hydra makes the run folder (eval.py's is
    checked once the run's saved options are merged in); when the job starts, Hydra reports the
    job's own errors as usual again (a stripped traceback, exit 1)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if "ckpt_path" in config:  # eval.py: the run it scores (evaluate_run checks the run's own options)
            with user_error_exit():
                check_eval_source(config)
            return
        try:
            check_recipe(config)
        except RecipeError as err:
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(USER_ERROR_EXIT) from None
        with user_error_exit():  # a missing data folder or checkpoint: one line, nothing heavy imported
            check_inputs(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A grid's every point checked before the first runs (`gsr_train.options.sweep_points`)."""
        try:
            check_sweep_points(config)
        except RecipeError as err:
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(USER_ERROR_EXIT) from None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        _restore()


def register_help() -> None:
    """``${options_help:}``, the text of ``--help`` (``hydra.help.template`` in conf/config.yaml):
    the options of the experiment picked, with their types and descriptions."""
    if not OmegaConf.has_resolver("options_help"):
        OmegaConf.register_new_resolver("options_help", _options_help)


def _options_help(*, _root_: DictConfig) -> str:
    return help_template(_root_)


def run_hydra_app(task: Callable[[DictConfig], Any], config_name: str, argv: Sequence[str]) -> Any:
    """``task`` as a Hydra app of ``conf/<config_name>.yaml`` on the command line ``argv`` (overrides
    and Hydra's flags: ``-m``, ``--cfg job``...), given, not read from ``sys.argv``: a gsr-train verb.
    ``@hydra.main`` reads ``sys.argv``; it sees ``argv`` there while it runs."""
    from gsr_train.config import project_root

    conf = project_root() / "conf"
    app = hydra.main(config_path=str(conf), config_name=config_name, version_base="1.3")(task)

    def go() -> Any:
        saved = sys.argv
        sys.argv = [saved[0] if saved else config_name, *argv]
        try:
            return app()
        finally:
            sys.argv = saved

    return run_hydra(go, conf, config_name, overrides=command_line_overrides(argv))


# Hydra's flags that take a value (``-cn NAME``; ``--info`` takes one of INFO_TOPICS, or none)
VALUE_FLAGS = frozenset({"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg"})
VALUE_FLAGS |= {"-p", "--package", "--experimental-rerun"}
INFO_TOPICS = frozenset({"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"})


def command_line_overrides(argv: Sequence[str]) -> list[str]:
    """The overrides among a Hydra command line's words (what its parser keeps as ``overrides``): every
    word that is neither a flag nor a flag's value. Only the refusal messages read them; Hydra parses
    the command line itself."""
    words, found, i = list(argv), [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and "=" not in word:
            takes = word in VALUE_FLAGS or (
                word in ("-i", "--info") and i + 1 < len(words) and words[i + 1] in INFO_TOPICS
            )
            i += 2 if takes else 1
            continue
        if not word.startswith("-"):
            found.append(word)
        i += 1
    return found


def byte_order_marked(overrides: Sequence[str], config_dir: Path) -> Path | None:
    """The config file a group choice (``+experiment=NAME``, ``data=NAME``) names that starts with a UTF-8
    BOM (an editor's habit on Windows): Hydra reads it, but not its ``# @package`` line."""
    for o in overrides:
        choice = re.fullmatch(r"\+{0,2}([\w/]+)=([\w./-]+)", o.strip())
        if choice is None:
            continue
        path = config_dir / choice.group(1) / f"{choice.group(2)}.yaml"
        try:
            with open(path, "rb") as f:
                if f.read(3) == b"\xef\xbb\xbf":
                    return path
        except OSError:
            continue
    return None


def _overrides() -> list[str]:
    """The overrides of this process's command line, as Hydra reads them."""
    return command_line_overrides(sys.argv[1:])


# ------------------------------------------------------------------ one line per mistake
def composition_error(err: Exception, overrides: Sequence[str], config_dir: Path, config_name: str) -> str:
    """The one-line message of a composition error of Hydra's."""
    if isinstance(err, MissingConfigException) and err.options and "/" in str(err.missing_cfg_file):
        group, _, name = str(err.missing_cfg_file).rpartition("/")
        options = list(err.options)
        close = difflib.get_close_matches(name, options, n=1)
        return (
            f"{group}={name}: no such option in conf/{group}/"
            + (f"; did you mean {group}={close[0]}?" if close else "")
            + f" (choices: {', '.join(options)})"
        )
    if isinstance(err, OverrideParseException):
        reason = err.message.splitlines()[0].strip() if err.message else "a syntax error"
        return f"{err.override}: Hydra cannot parse this override: {reason} (its grammar: {GRAMMAR})"
    text = str(err)
    if missing := re.match(r"Could not override '(.+?)'", text):
        return missing_key_error(missing.group(1), overrides, config_dir, config_name)
    if present := re.match(r"Could not append to config\. An item is already at '(.+?)'", text):
        key = present.group(1)
        return f"+{key}: {key} is already in the config; set it without + ({key}=...), or with ++ to add or set"
    return _squeezed(err)


def _squeezed(err: BaseException) -> str:
    """Hydra's message (and its cause's) on one line, without the search path listing."""
    text = str(err).split("\nConfig search path:", 1)[0]
    if err.__cause__ is not None:
        text += "; " + str(err.__cause__)
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _parse(overrides: Sequence[str]) -> list[Any]:
    return OverridesParser.create().parse_overrides(list(overrides))


def missing_key_error(key: str, overrides: Sequence[str], config_dir: Path, config_name: str) -> str:
    """A key the config lacks, typed without ``+``: the recipe check's line for it (composed once
    more with ``+key=value``), or, in a section the recipes leave open, the closest key there."""
    missing = [key]
    parsed = [o for o in _parse(overrides) if not o.is_sweep_override()]
    cfg = None
    for _ in range(len(parsed) + 1):
        lines = [("+" if o.key_or_group in missing and not o.is_add() else "") + o.input_line for o in parsed]
        try:
            cfg = compose_config(config_dir, config_name, lines)
            break
        except ConfigCompositionException as err:
            again = re.match(r"Could not override '(.+?)'", str(err))
            if again is None or again.group(1) in missing:
                break
            missing.append(again.group(1))
    if cfg is None:
        return f"{key}: not in the config; did you mean +{key}=... (a new key)?"
    choices = dict(OmegaConf.select(cfg, "hydra.runtime.choices", default={}) or {})
    errors = config_errors(cfg)
    lines = []
    for name in missing:
        named = [e for e in errors if _names(e, name)]
        lines += named[:1] or [_open_section_line(cfg, name, choices, config_name)]
    lines = list(dict.fromkeys(lines))
    return lines[0] if len(lines) == 1 else "unknown options:\n  " + "\n  ".join(lines)


def _names(error: str, key: str) -> bool:
    """Does a check's line name ``key`` (or the unknown section above it)?"""
    named = re.split(r"[=:]", error, maxsplit=1)[0].strip()
    return key == named or key.startswith(named + ".")


def _open_section_line(cfg: DictConfig, key: str, choices: dict[str, Any], config_name: str) -> str:
    """A key of an open section (data, trainer, model.config, ...) the composed config lacks."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    known = sorted(str(k) for k in node.keys() if str(k) != leaf) if isinstance(node, DictConfig) else []
    close = difflib.get_close_matches(leaf, known, n=1)
    head = key.split(".", 1)[0]
    where = f"conf/{head}/{choices[head]}.yaml" if head in choices else f"conf/{config_name}.yaml"
    return (
        f"{key}: not a key of {parent or 'the config'} ({where})"
        + (f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else "")
        + f" (a new key: +{key}=...)"
    )


def compose_config(config_dir: Path, config_name: str, overrides: list[str]) -> DictConfig:
    """The config Hydra composes from ``config_dir/config_name`` and ``overrides`` (with ``hydra``)."""
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
