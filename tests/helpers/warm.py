"""The model's kernel compiled once for the whole suite, beside its first tests.

On a cold numba cache (a clean clone: CI) the suite's first tests that evaluate a mapping
each compiled the kernel, two workers and their subprocesses at once: the variant for batches
with row splits took 130-150 s each time, twice in the run timed (2026-12-02). :func:`start` (from
the controller, before the workers start) launches ``python -m tests.helpers.warm``, which
evaluates one mapping of AlexNet on ``localhost`` without row splits, then one with conv1
split by rows. The kernel's :func:`~models_analytical.schedule.compiled.one_compiler` makes
any process that needs a variant while it compiles wait for it and read numba's cache. On a
warm cache the child reads the cache and is done in a few seconds.
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


def compile_kernel() -> None:
    """Both variants of the kernel, the one most tests need first."""
    import yaml

    from dse.mapping import from_device_lists
    from dse.net import load_net
    from dse.paths import CONF_DIR
    from dse.platform import load_platform
    from models_analytical import ahead
    from models_analytical.coefficients import load_coefficients
    from models_analytical.model import AnalyticalModel

    ahead.compile_kernel()
    cfg = yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text())
    platform = load_platform(cfg)
    graph = load_net({"name": "alexnet"}).graph
    layers = [[0] for _ in range(len(graph))]
    layers[0] = [0, 1]  # conv1, by rows over both cores
    mappings = from_device_lists(graph, len(platform), [layers], rows=[0])
    coefficients = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    AnalyticalModel(graph, platform, coefficients, 1).evaluate(mappings)


if __name__ == "__main__":
    compile_kernel()
