"""Running an entry point as a user would, in a subprocess from the repository root."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
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


def processes_naming(marker: str) -> list[str]:
    """Command lines of the live processes (zombies aside) that name ``marker``."""
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z" and int(p.name) != os.getpid():
            found.append(f"{p.name}: {cmd[:160]}")
    return found


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_until(check, timeout_s: float) -> bool:  # noqa: ANN001
    """Whether ``check()`` holds within ``timeout_s`` (asked every 0.1 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


@contextlib.contextmanager
def reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc`` for the block; killed and waited for at its end if still running (a test that
    fails midway leaves no process behind)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
