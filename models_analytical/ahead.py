"""The model's kernel compiled ahead, in a child process, while its parent starts.

A first run (numba's cache cold) compiles the kernel's one big function,
:func:`~models_analytical.schedule.kernel.simulate_chunk`, which takes longer than the search's
other kernels and its start (imports, configuration, network, model). One after another they
add up; side by side, on two cores, the longest of them is most of the first run's extra time
(``docs/results/performance.md``, "The first run").

:func:`start` launches ``python -m models_analytical.ahead`` when the cache lacks the kernel
for batches without row splits (else nothing starts). The child compiles it by evaluating one
mapping of a small network (AlexNet on ``localhost``: the kernel's argument types are the same
for every network and platform, which ``tests/model/test_ahead.py`` checks on others), and
numba writes it to its cache. The parent calls :func:`wait` before its first batch (``python -m
dse`` does, after its rehearsal): the kernel then comes from the cache rather than being
compiled a second time. Meanwhile the parent compiles the search's own kernels
(:mod:`dse.search.rehearsal`).

The child dies with its parent (:func:`dse.lifetime.die_with_parent`; numba writes a
cache file whole or not at all). Should it fail, the parent compiles the kernel itself, as
before: slower, never wrong.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from typing import IO

from dse.lifetime import die_with_parent

#: What the user reads when the child compiles the kernel (the first-run extra time of
#: ``python -m dse +net=vgg16 chromosome=advanced``, scripts/bench_first_run.py).
NOTICE = (
    "compiling the model's kernel once (numba, into its cache) in a second process while dse "
    "starts: seconds to tens of seconds, by the machine; later runs start in a few seconds"
)

#: The child compiling the kernel and the file of its stderr, until :func:`wait` is done.
_CHILD: tuple[subprocess.Popen, IO[bytes]] | None = None


def start() -> bool:
    """Start the child if numba's cache lacks the kernel and none was started and not yet
    waited for; whether it started. Reads one index file; the import it needs (numba and the
    kernel's modules) is one its caller makes anyway."""
    global _CHILD
    from models_analytical.schedule.kernel import kernel_in_cache

    if _CHILD is not None or kernel_in_cache(False) is not False:
        return False
    # a file, not a pipe (a full pipe would block the child); closed by wait()
    stderr = tempfile.TemporaryFile()  # noqa: SIM115
    child = subprocess.Popen(
        [sys.executable, "-m", __name__],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        preexec_fn=die_with_parent(),
    )
    _CHILD = (child, stderr)
    return True


def compiling() -> bool:
    """Whether the child of :func:`start` is still compiling the kernel."""
    return _CHILD is not None and _CHILD[0].poll() is None


def wait() -> None:
    """Wait for the child of :func:`start`, if one runs (nothing otherwise); a child that
    failed is logged, and the caller compiles the kernel itself."""
    global _CHILD
    if _CHILD is None:
        return
    (child, stderr), _CHILD = _CHILD, None
    child.wait()
    stderr.seek(0)
    err = stderr.read()
    stderr.close()
    if child.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        logging.getLogger("dse").warning(
            f"compiling the model's kernel in a child process failed (exit {child.returncode}: "
            f"{last[0]}); compiling it here"
        )


def compile_kernel(variants: tuple[bool, ...] = (False,)) -> None:
    """What the child does: evaluate one mapping of AlexNet on ``localhost`` (every layer on
    its first device), on one thread. ``variants``: the kernel's variants to compile, False
    for batches without row splits (that mapping), True for batches with them (conv1 split by
    rows over both cores instead; ``tests/helpers/warm.py`` compiles both)."""
    import numpy as np
    import yaml

    from dse.mapping import Mappings, from_device_lists
    from dse.mapping.mappings import layer_units
    from dse.net import load_net
    from dse.paths import CONF_DIR
    from dse.platform import load_platform
    from models_analytical.coefficients import load_coefficients
    from models_analytical.model import AnalyticalModel

    cfg = yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text())
    platform = load_platform(cfg)
    coefficients = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    graph = load_net({"name": "alexnet"}).graph
    model = AnalyticalModel(graph, platform, coefficients, 1)
    for rows in variants:
        if rows:
            layers = [[0] for _ in range(len(graph))]
            layers[0] = [0, 1]  # conv1, by rows over both cores
            model.evaluate(from_device_lists(graph, len(platform), [layers], rows=[0]))
            continue
        split = graph.split_layers
        device = np.zeros((1, len(graph)), dtype=np.int64)
        device[0, split] = -1
        sizes = np.zeros((1, len(split), len(platform)), dtype=np.int32)
        sizes[0, :, 0] = layer_units(graph)[0, split]  # all its output channels on the first
        model.evaluate(Mappings(device, sizes))


if __name__ == "__main__":
    compile_kernel()
