"""Shared entry-point plumbing: the config tree, override checks and one-line user errors.

Hydra and dse.config are imported inside the functions that use them: an entry point imports
this module first, to set its signal handlers before anything heavy (Hydra's import alone is
0.17 s), so that Ctrl-C while it starts ends it cleanly.

A user error is a :class:`~dse.errors.DseError`: one line on stderr and exit status 2. Inside a
Hydra job it does not end the process: in ``--multirun`` the other jobs still run, and the
process exits 2 at the end if any job failed. Interrupted work exits 130. What the jobs tell the
command (failures, sweep directories, what a stop would interrupt) goes into its run context
(:class:`dse.context.RunContext`), made by :func:`run` and reached through :func:`run_context`.
"""

from __future__ import annotations

import difflib
import functools
import gc
import itertools
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dse.context import INTERRUPTED, STOP_SIGNALS, RunContext, hung_up
from dse.errors import DseError
from dse.files import LOCK
from dse.paths import CONF_DIR, shown

#: The run context of the command this process runs (:func:`run` makes a new one).
_context: RunContext | None = None


def run_context() -> RunContext:
    """The run context of the command this process runs, made by :func:`run`: where its jobs
    (and the sweeper) report failures and sweep directories, and where a run says whether a
    stop would lose work. Outside a command (a test calling a Hydra task itself) a context of
    its own, made on first use, that no command reads."""
    global _context
    if _context is None:
        _context = RunContext()
    return _context


def group_choices(group: str) -> list[str]:
    """Option names of a config group: registered structured configs and conf/<group>/*.yaml."""
    from hydra.core.config_store import ConfigStore

    from dse.config import register

    register()
    try:  # options are NAME.yaml; other entries are the group's own groups
        stored = [n[:-5] for n in ConfigStore.instance().list(group) if n.endswith(".yaml")]
    except OSError:
        stored = []
    files = [p.stem for p in (CONF_DIR / group).glob("*.yaml")]
    return sorted({*stored, *files} - {"base_config"})


def output_format(cfg: Mapping[str, Any]) -> str:
    """The `format` key of a printing entry point: table (default) or json."""
    fmt = str(cfg.get("format", "table"))
    if fmt not in ("table", "json"):
        raise DseError(f"unknown format '{fmt}': choose table or json")
    return fmt


def one_line(exc: BaseException) -> str:
    """The first line of an exception and of each of its causes, joined."""
    parts: list[str] = []
    at: BaseException | None = exc
    while at is not None and len(parts) < 4:
        text = str(at).strip().splitlines()
        # a cause whose text an earlier line already holds adds nothing ("Invalid value...")
        if text and not any(text[0].rstrip(".") in p for p in parts) and "$" not in text[0]:
            parts.append(text[0].rstrip("."))
        at = at.__cause__ or at.__context__
    return ": ".join(parts) or "invalid configuration"


#: Options after which nothing but a page is printed: dse's own (:func:`info_flags`) and
#: Hydra's (its help, the config, run information, shell completion).
PRINTS_AND_EXITS = frozenset(
    {"-h", "--help", "--version", "--hydra-help", "-c", "--cfg", "-i", "--info"}
    | {"-sc", "--shell-completion", "-p", "--package", "--resolve"}
)

_FLAGS_WITH_VALUE = frozenset(
    {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn"}
    | {"--config-dir", "-cd", "--info", "-i", "--experimental-rerun"}
)


#: Hydra group values users reach for that are not the ones dse has, with what to use instead.
_HYDRA_CHOICES = {
    "hydra/sweeper": {
        "optuna": "hydra/sweeper=optuna is hydra-optuna-sweeper (pinned to optuna<3, not "
        "installed): use hydra/sweeper=dse_optuna, dse's sweeper on current Optuna",
    },
}


def check_overrides(argv: Sequence[str], config_name: str) -> None:
    """Compose the config once for every value the command line lists, so an unknown option,
    a wrong type or a bad value is one line before any job starts."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep

    from dse.config import check

    args, skip = [], False
    for a in argv:  # Hydra's own flags, and the value after those that take one
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = a in _FLAGS_WITH_VALUE
        else:
            args.append(a)
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except Exception as exc:  # noqa: BLE001 - Hydra's parser errors are many classes
        why = in_parentheses(args) or f"cannot read the command line: {one_line(exc)}"
        raise DseError(why) from None
    multirun = any(a in ("-m", "--multirun") for a in argv) or any(
        o.get_key_element() == "hydra.mode" and str(o.value()) == "MULTIRUN" for o in overrides
    )
    sweeper = next(
        (str(o.value()) for o in overrides if o.get_key_element().lstrip("+") == "hydra/sweeper"),
        "basic",
    )
    base: list[str] = []
    hydra_lines: list[str] = []  # Hydra's own settings: composed once, after the others
    variants: list[list[str]] = []
    for o in overrides:
        key = o.get_key_element()
        if o.is_sweep_override() and not multirun:
            raise DseError(needs_multirun(o))
        if (
            key.lstrip("+~") in _HYDRA_CHOICES
            and str(o.value()) in _HYDRA_CHOICES[key.lstrip("+~")]
        ):
            raise DseError(_HYDRA_CHOICES[key.lstrip("+~")][str(o.value())])
        if key.lstrip("+~").startswith("hydra.sweeper.params"):
            raise DseError(
                "hydra.sweeper.params is for config files; on the command line write each swept "
                "key itself, e.g. algorithm.pop_size=range(100,501,100) chromosome=naive,advanced"
            )
        if key.lstrip("+~").startswith("hydra"):
            if not o.is_sweep_override() and o.input_line is not None:
                hydra_lines.append(o.input_line)
            continue
        if o.is_sweep_override() and sweeper == "basic" and isinstance(o.value(), IntervalSweep):
            raise DseError(
                f"{o.input_line}: Hydra's basic sweeper runs lists, not intervals: add "
                "hydra/sweeper=dse_optuna hydra.sweeper.n_trials=N to sample it, or give "
                "range(start,stop,step) or choices"
            )
        if o.is_sweep_override():
            try:
                values = list(o.sweep_string_iterator())
            except Exception:  # noqa: BLE001 - interval(), tag(): checked by the job itself
                continue
            variants.append([f"{key}={v}" for v in values])
        else:
            assert o.input_line is not None  # parse_overrides keeps each override's text
            base.append(o.input_line)
        group = key.lstrip("+~")
        if o.value() == "" and not key.startswith("~") and group_choices(group):
            raise DseError(
                f"{o.input_line} names no {group}: choose one of {', '.join(group_choices(group))}"
            )
        if o.is_sweep_override() or "." in group or not o.value():
            continue
        choices = group_choices(group)
        if choices and str(o.value()) not in choices:
            close = difflib.get_close_matches(str(o.value()), choices, n=1)
            plus = "+" if key.startswith("+") else ""
            hint = f"did you mean {plus}{group}={close[0]}? " if close else ""
            raise DseError(
                f"unknown {group} '{o.value()}': {hint}choose one of {', '.join(choices)}"
            )
    tries = [base] + [[*base, v] for vs in variants for v in vs]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for ov in tries:
            try:
                cfg = compose(config_name, overrides=ov)
            except Exception as exc:  # noqa: BLE001 - composition errors are many classes
                raise DseError(mistake(exc, ov, config_name, args) or one_line(exc)) from None
            added = unknown_added_key(ov, config_name)
            if added:
                raise DseError(added)
            try:
                check(cfg)
            except DseError:
                raise
            except Exception as exc:  # noqa: BLE001 - validation errors are many classes
                raise DseError(one_line(exc)) from None
        if hydra_lines:
            try:
                compose(config_name, overrides=[*base, *hydra_lines], return_hydra_config=True)
            except Exception as exc:  # noqa: BLE001 - composition errors are many classes
                raise DseError(hydra_mistake(exc, hydra_lines)) from None


# --- hints for the likeliest mistakes --------------------------------------------------------


def in_parentheses(args: Sequence[str]) -> str | None:
    """One line for a list written as Python's tuple (``key=(1,3,224,224)``), which Hydra's
    grammar cannot read: the form to write; None when no argument is one."""
    for line in args:
        found = re.fullmatch(r"([^=]+)=\((.*)\)", line)
        if found:
            return f"{line}: write a list in brackets: '{found[1]}=[{found[2]}]'"
    return None


def needs_multirun(override: Any) -> str:
    """One line for a sweep given without ``--multirun``: a comma list is most often a list
    value written without its brackets (``net.input_shape=1,3,640,640``)."""
    from hydra.core.override_parser.types import ValueType

    line = str(override.input_line)
    if override.value_type == ValueType.SIMPLE_CHOICE_SWEEP:
        key, value = line.split("=", 1)
        return (
            f"{line}: a comma list sweeps its values (with --multirun); for one list value "
            f"write '{key}=[{value}]'"
        )
    return f"{line} sweeps several values: add --multirun"


def config_keys(config_name: str, overrides: Sequence[str]) -> list[str]:
    """Every dotted key of the config ``overrides`` compose (those that do), the network's
    among them even when no network is chosen."""
    from hydra import compose
    from omegaconf import OmegaConf

    from dse.config import NetConfig

    def flatten(node: Any, prefix: str) -> list[str]:
        if not isinstance(node, dict):
            return []
        out = []
        for k, v in node.items():
            out.append(f"{prefix}{k}")
            out += flatten(v, f"{prefix}{k}.")
        return out

    try:
        cfg = compose(config_name, overrides=list(overrides))
    except Exception:  # noqa: BLE001 - the overrides were the problem: the defaults then
        cfg = compose(config_name, overrides=[])
    keys = flatten(OmegaConf.to_container(cfg, resolve=False), "")
    keys += [f"net.{k}" for k in NetConfig.__dataclass_fields__ if f"net.{k}" not in keys]
    return [k for k in keys if not k.startswith("hydra") and "._" not in f".{k}"]


def did_you_mean(key: str, keys: Sequence[str]) -> str | None:
    """The key of ``keys`` closest to ``key`` (whole, or by its last part: ``popsize`` gives
    ``algorithm.pop_size``), if one is close."""
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
    if close:
        return close[0]
    leaf = key.rsplit(".", 1)[-1]
    by_leaf: dict[str, str] = {}
    for k in keys:
        by_leaf.setdefault(k.rsplit(".", 1)[-1], k)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    return by_leaf[close[0]] if close else None


def _unknown_key(key: str, line: str, keys: Sequence[str], config_name: str) -> str:
    group = "/" in line.split("=", 1)[0]  # a group given by path: algorithm/crossover=...
    near = did_you_mean(key.replace("/", "."), keys)
    if near and group:
        near = near.replace(".", "/")
    head = f"{line}: there is no {'group' if group else 'key'} {key}"
    module = "dse" if config_name == "config" else f"dse.{config_name}"
    if near:
        return f"{head}: did you mean {near}?"
    return f"{head} (every key and its default: python -m {module} --cfg job)"


def mistake(
    exc: BaseException, overrides: Sequence[str], config_name: str, given: Sequence[str] = ()
) -> str | None:
    """One line naming the fix for a composition error of ``overrides`` (from the command
    line ``given``) that a hint covers: a group without a default given without ``+``
    (``net=vgg16``), a key given ``+`` that is there already, a misspelled key; None for the
    others."""
    text = str(exc)
    wrong = wrong_type(one_line(exc))
    if wrong:
        return wrong
    found = (
        re.search(r"Could not (?:override|delete) '([^']+)'", text)
        or re.search(r"An item is already at '([^']+)'", text)
        or re.search(r"Multiple values for ([\w/.]+)\.", text)
    )
    if not found:
        return None
    key = found.group(1)

    def named(o: str) -> bool:
        return o.lstrip("+~").split("=", 1)[0] == key

    line = next((o for o in (*given, *overrides) if named(o)), key)
    value = line.split("=", 1)[1] if "=" in line else ""
    if "An item is already at" in text or "Multiple values for" in text:
        return f"{line}: {key} is in the config already; drop the plus: {line.lstrip('+')}"
    if "No match in the defaults list" in text:
        if line.startswith("~"):
            return f"{line}: no {key} is chosen, so there is none to remove"
        module = "dse" if config_name == "config" else f"dse.{config_name}"
        return (
            f"{line}: {key} has no default to override; add it with a plus: did you mean "
            f"+{key}={value or 'NAME'}? (python -m {module} --help lists the options)"
        )
    others = [o for o in overrides if not named(o)]
    return _unknown_key(key, line, config_keys(config_name, others), config_name)


#: What a key of each of OmegaConf's value types takes, as a user writes it.
_TYPE_WORDS = {"Integer": "a whole number", "Float": "a number", "Boolean": "true or false"}


def wrong_type(text: str) -> str | None:
    """``KEY=VALUE: KEY takes a whole number, not 'VALUE'`` for OmegaConf's refusal of a value
    of the wrong type (``text``: the composition error's lines, joined); None for the others."""
    found = re.search(
        r"Error merging override ([^=\s]+)=(.*?): Value '(.*?)' (?:of type '\w+' could not be "
        r"converted to (Integer|Float|Boolean)|is not a valid (bool))",
        text,
    )
    if not found:
        return None
    key, given, value, kind, boolean = found.groups()
    words = _TYPE_WORDS["Boolean" if boolean else kind]
    return f"{key}={given}: {key.lstrip('+')} takes {words}, not '{value}'"


def hydra_mistake(exc: BaseException, lines: Sequence[str]) -> str:
    """One line for a composition error of Hydra's own settings ``lines`` (``hydra.*``,
    ``hydra/GROUP=``): a value of the wrong type, a sweeper key without dse's sweeper, a group
    option that is not there (with the options), else the error's first lines."""
    text = one_line(exc)
    wrong = wrong_type(text)
    if wrong:
        return wrong
    found = re.search(r"Key '(\w+)' not in 'BasicSweeperConf'", text)
    if found:
        key = found.group(1)
        line = next((x for x in lines if x.split("=", 1)[0].endswith(f".{key}")), key)
        return f"{line}: Hydra's basic sweeper has no key {key}: add hydra/sweeper=dse_optuna"
    full = str(exc)
    if "Available options in" in full:
        after = full.split("Available options in", 1)[1].splitlines()[1:]
        options = [x.strip() for x in itertools.takewhile(lambda x: x.startswith("\t"), after)]
        return f"{text}: choose one of {', '.join(options)}"
    return text


def unknown_added_key(overrides: Sequence[str], config_name: str) -> str | None:
    """``+key=value`` adds a key Hydra accepts and dse never reads (``+popsize=3``): one line
    with the nearest key. Keys of a platform (free-form YAML) and Hydra's are left alone."""
    from dse.config import register

    register()
    added = [
        o
        for o in overrides
        if o.startswith("+") and not o.startswith("++") and "=" in o and not o.startswith("+hydra")
    ]
    for line in added:
        key = line[1:].split("=", 1)[0]
        if group_choices(key) or key.startswith("platform."):
            continue
        others = [o for o in overrides if o != line]
        keys = config_keys(config_name, others)
        if key not in keys:
            return _unknown_key(key, line, keys, config_name)
    return None


def say(message: str, error: bool = False) -> None:
    """Print for the user and keep it in the run's log (Hydra's job log file)."""

    print(message, file=sys.stderr if error else sys.stdout)
    if not logging.getLogger().handlers:  # entry points without a run log (inspect, evaluate)
        return
    for line in message.splitlines():
        logging.getLogger("dse").log(logging.ERROR if error else logging.INFO, line)


def stop_early_on_signals() -> None:
    """Until :func:`run` takes over, SIGINT and SIGTERM end the process at once with the
    interrupted status (nothing is computed yet while modules load)."""

    def _now(signum: int, frame: object) -> None:
        hung_up(signum)
        print("error: interrupted", file=sys.stderr)
        os._exit(INTERRUPTED)

    for s in STOP_SIGNALS:
        signal.signal(s, _now)


def stopped_cleanly(main: Callable[[], Any]) -> Any:
    """Run the ``main`` of an entry point without Hydra (after :func:`stop_early_on_signals`
    at its top): a stop signal while it runs is ``error: interrupted`` and the interrupted
    status once its context managers have cleaned up (no half-written file), not a
    traceback."""

    def _terminate(signum: int, frame: object) -> None:
        hung_up(signum)
        raise KeyboardInterrupt

    for s in STOP_SIGNALS[1:]:
        signal.signal(s, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return main()
    except KeyboardInterrupt:
        fail("interrupted", INTERRUPTED)


def fail(message: str, status: int = 2) -> None:
    """Print one error line and exit non-zero."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def info_flags(argv: Sequence[str], config_name: str) -> None:
    """``--help`` / ``-h`` and ``--version``: printed, exit 0 (before Hydra, whose own pages
    are ``--hydra-help`` and a 90-line config dump)."""
    from dse.usage import HELP, usage, version

    if "--version" in argv:
        print(version())
        sys.exit(0)
    if "--help" in argv or "-h" in argv:
        print(usage(config_name, {g: group_choices(g) for g in HELP[config_name].groups}))
        sys.exit(0)


def run(main: Callable[[], Any], config_name: str = "config") -> None:
    """Run a Hydra main function: overrides checked first, user errors as one line (exit 2),
    Ctrl-C as exit 130, and exit 2 at the end when any job of a multirun failed. The command's
    :class:`~dse.context.RunContext` is made here, before anything runs."""
    global _context
    context = _context = RunContext()

    def _terminate(signum: int, frame: object) -> None:
        hung_up(signum)
        raise KeyboardInterrupt  # SIGTERM is Ctrl-C: the same clean stop and exit status

    for s in STOP_SIGNALS[1:]:  # SIGTERM and SIGHUP; SIGINT raises KeyboardInterrupt itself
        signal.signal(s, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            # The imports are a few hundred thousand objects that live until exit: frozen out of
            # the collector's way, full collections no longer walk them (0.2 s of a VGG-16 run).
            # After the jobs, what is left is frozen too, so the interpreter's last collection
            # at exit (0.4 s) is skipped; cleanups here run from context managers and atexit.
            gc.freeze()
            from dse.config import register  # after the signal handlers: it imports Hydra

            register()
            info_flags(sys.argv[1:], config_name)
            check_overrides(sys.argv[1:], config_name)
            main()
            gc.freeze()
            for where, jobs in context.sweep_dirs.items():
                print(
                    f"multirun: {jobs} job{'s' if jobs > 1 else ''} in {shown(where)} (compare "
                    f"them: python -m dse.compare {shown(where)})"
                )
        except DseError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            if context.saved_work:  # after the outputs were written (printing the last lines)
                print(context.saved_work, file=sys.stderr)
                sys.exit(INTERRUPTED)
            fail("interrupted", INTERRUPTED)
        except BrokenPipeError:
            _quiet_stdout()
        if context.failed():
            if len(context.failed_jobs) > 1:
                failed = len(context.failed_jobs)
                print(f"error: {failed} jobs failed (see above)", file=sys.stderr)
            sys.exit(2)
    finally:
        # The work is done and its outputs written: a signal now is ignored. Python's teardown
        # puts a Python-level handler back to the OS default, so Ctrl-C in that window killed
        # the process (status -2) after a complete run; an ignored signal stays ignored.
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def _job_label() -> str:
    """`job 3 (chromosome.splits=99): ` inside a multirun, else ''."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            return f"job {hc.job.num} ({','.join(hc.overrides.task)}): "
    except Exception:  # noqa: BLE001 - not inside a Hydra job
        pass
    return ""


def _count_sweep_job() -> None:
    """Inside a multirun: one more job in its directory (the run context's ``sweep_dirs``)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            run_context().job_in_sweep(str(Path(hc.sweep.dir).absolute()))
    except Exception:  # noqa: BLE001 - not inside a Hydra job
        pass


def _quiet_stdout() -> None:
    """Send further output to /dev/null (the pipe we printed to was closed)."""

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _remove_empty_run_dir() -> None:
    """A job that failed before writing anything leaves no directory behind (only Hydra's own
    ``.hydra/``, an empty log and its released lock would be in it)."""

    try:
        from hydra.core.hydra_config import HydraConfig

        out = Path(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - not inside a Hydra job
        return
    if not out.is_dir() or out.resolve() == Path.cwd().resolve():
        return
    entries = list(out.iterdir())
    if all(
        p.name in (".hydra", LOCK) or (p.suffix == ".log" and p.stat().st_size == 0)
        for p in entries
    ):
        shutil.rmtree(out, ignore_errors=True)


def guarded(task: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a Hydra task: a DseError becomes one line and a failed result, not a traceback and
    not the end of the other jobs of a multirun."""

    @functools.wraps(task)
    def wrapper(*args: object, **kwargs: object) -> Any:
        _count_sweep_job()
        try:
            return task(*args, **kwargs)
        except DseError as exc:
            _remove_empty_run_dir()  # before the error goes into the job's log there
            say(f"error: {_job_label()}{exc}", error=True)
            run_context().job_failed(str(exc))
            return {"status": "failed", "reason": str(exc)}
        except BrokenPipeError:  # `python -m dse.inspect ... | head`: the reader has gone
            _quiet_stdout()
            return {"status": "ok"}

    return wrapper
