"""Running an entry point as a user would, in a subprocess from the repository root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def as_from_a_terminal() -> None:
    """A child's SIGHUP as a terminal's shell leaves it (a preexec_fn), even when the tests run
    under nohup: nohup ignores SIGHUP, the child inherits that, and dse then keeps ignoring it
    by design, so a test of SIGHUP would test nothing."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _limit(memory_bytes: int | None):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        if memory_bytes is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return apply


def run_module(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    memory_bytes: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from the repository root; ``memory_bytes`` caps its address
    space (a blow-up fails the test instead of the machine)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=_limit(memory_bytes),
        check=False,
    )
