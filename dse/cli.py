"""Shared entry-point plumbing: Hydra config location, group checks, one-line user errors."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dse.errors import DseError

#: The Hydra config tree shared by every entry point (`python -m dse`, `dse.inspect`, ...).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def group_choices(group: str) -> list[str]:
    """Option names of a Hydra config group (the yaml files under conf/<group>/)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_overrides(argv: Sequence[str]) -> None:
    """Reject an unknown choice for a config group before Hydra prints a multi-line error."""
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()} if CONF_DIR.is_dir() else set()
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in groups or not value or "," in value:
            continue
        choices = group_choices(key)
        if value not in choices:
            raise DseError(f"unknown {key} '{value}': choose one of {', '.join(choices)}")


def output_format(cfg: Mapping[str, Any]) -> str:
    """The `format` key of a printing entry point: table (default) or json."""
    fmt = str(cfg.get("format", "table"))
    if fmt not in ("table", "json"):
        raise DseError(f"unknown format '{fmt}': choose table or json")
    return fmt


def fail(message: str) -> None:
    """Print one error line and exit non-zero."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def run(main: Callable[[], None]) -> None:
    """Run a Hydra main function, turning user errors into one line and exit status 2."""
    try:
        check_group_overrides(sys.argv[1:])
        main()
    except DseError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted")


def guarded(task: Callable[..., None]) -> Callable[..., None]:
    """Wrap a Hydra task so a DseError raised inside it exits with one line, not a traceback."""

    @functools.wraps(task)
    def wrapper(*args: object, **kwargs: object) -> None:
        try:
            task(*args, **kwargs)
        except DseError as exc:
            fail(str(exc))

    return wrapper
