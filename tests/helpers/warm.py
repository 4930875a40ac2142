"""The model's kernel compiled once for the whole suite, beside its first tests.

On a cold numba cache (a clean clone: CI) the suite's first tests that evaluate a mapping
each compiled the kernel, two workers and their subprocesses at once: the variant for batches
with row splits took 130-150 s each time, twice in the run timed (2026-12-02). :func:`start`
(from the controller, before the workers start) launches ``python -m tests.helpers.warm``,
which compiles both variants, the one without row splits first
(:func:`models_analytical.ahead.compile_kernel`). The kernel's
:func:`~models_analytical.schedule.compiled.one_compiler` makes any process that needs a
variant while it compiles wait for it and read numba's cache. On a warm cache the child reads
the cache and is done in a few seconds.
"""

from __future__ import annotations

import subprocess
import sys

from dse.lifetime import die_with_parent
from tests.helpers.cli import ROOT


def start() -> subprocess.Popen:
    """The child compiling the kernel (dies with the calling process)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.warm"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent(),
    )


if __name__ == "__main__":
    from models_analytical import ahead

    ahead.compile_kernel((False, True))  # the variant most tests need first
