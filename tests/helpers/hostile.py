"""Feeding bad input to the entry points as a user would, many commands at once.

Every case runs ``python -m MODULE ARGS`` from the repository root in its own subprocess, with
a wall-clock timeout (a hang fails the test) and optionally an address-space limit (a blow-up
fails the test instead of the machine). Cases run concurrently: most of each is interpreter
start-up.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.cli import run_module

#: Seconds a bad input may take to be refused (start-up included, on a loaded machine).
TIMEOUT = 120


def run(
    module: str, args: Sequence[str], memory_bytes: int | None = None
) -> subprocess.CompletedProcess[str]:
    return run_module(module, *args, timeout=TIMEOUT, memory_bytes=memory_bytes)


def run_all(
    cases: Mapping[str, tuple[str, Sequence[str]]], memory_bytes: int | None = None
) -> dict[str, subprocess.CompletedProcess[str]]:
    """``{case: (module, args)}`` run concurrently; ``{case: completed process}``."""
    with ThreadPoolExecutor(4) as pool:
        futures = {k: pool.submit(run, m, a, memory_bytes) for k, (m, a) in cases.items()}
        return {k: f.result() for k, f in futures.items()}


def assert_one_line(r: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit status 2, nothing on stdout, and exactly one line on stderr: ``error: ...`` naming
    the problem (every one of ``words``), no traceback."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stdout == "", r.stdout[-2000:]
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def assert_each_one_line(
    results: Mapping[str, subprocess.CompletedProcess[str]], words: Mapping[str, Sequence[str]]
) -> None:
    """:func:`assert_one_line` for every case, reporting all the cases that fail at once."""
    failed = []
    for key, r in results.items():
        try:
            assert_one_line(r, *words[key])
        except AssertionError as exc:
            failed.append(f"case '{key}': {exc}")
    assert not failed, "\n".join(failed)


def refusal(key: str, words: Sequence[str], call) -> str | None:  # noqa: ANN001
    """None when ``call()`` raises a one-line DseError holding ``words``; else what went
    wrong for case ``key`` (accepted, or the message)."""
    from dse.errors import DseError

    try:
        call()
    except DseError as exc:
        text = str(exc)
        if "\n" in text or not all(w in text for w in words):
            return f"case '{key}': {text}"
        return None
    return f"case '{key}': accepted"


@contextmanager
def small_disk(where: Path, kb: int = 64) -> Iterator[Path]:
    """``where`` (made) as a tmpfs of ``kb`` kB for the block, unmounted after whatever
    happens: a disk to fill (:func:`fill`). Root only; the test is skipped elsewhere, saying
    why."""
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(where)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def fill(disk: Path, free_kb: int) -> None:
    """Empty the small disk ``disk``, then fill it but ``free_kb`` kB (its pages are 4 kB)."""
    for p in disk.iterdir():
        p.unlink()
    st = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * (st.f_blocks * st.f_frsize - free_kb * 1024))
