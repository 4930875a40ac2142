"""The model's kernel compiled by numba's stock pipeline and by dse's
(models_analytical.schedule.pipeline) gives the same figures, bit for bit, for random mappings
of every network of the zoo."""

from __future__ import annotations

import numpy as np
import pytest

from models_analytical.schedule.kernel import simulate_chunk
from models_analytical.schedule.pipeline import KernelCompiler
from tests.helpers import kernel_figures
from tests.helpers.cli import run_module


@pytest.mark.slow
@pytest.mark.first
def test_the_kernel_compiled_by_numbas_pipeline_and_by_ours_gives_the_same_figures(
    tmp_path, request
):
    """``tests.helpers.kernel_figures --stock`` computes every figure of every batch (each
    encoding, with and without layers split by rows, on three platforms and on one with every
    optional coefficient on) with the kernel compiled by numba's ``Compiler``; this process
    computes them with the kernel compiled by ``KernelCompiler``, and each array must hold the
    same bytes. numba's cache does not tell pipelines apart, so the stock kernel lives in a
    cache of its own: pytest's cache directory, kept from run to run (numba stamps it with its
    version and the kernel's sources, so an edit of either compiles it again; a cold one
    compiles both variants of the kernel, a few minutes)."""
    cache = getattr(request.config, "cache", None)  # None: pytest -p no:cacheprovider
    where = cache.mkdir("numba-stock-pipeline") if cache is not None else tmp_path / "numba"
    out = tmp_path / "stock.npz"
    done = run_module(
        "tests.helpers.kernel_figures",
        str(out),
        "--stock",
        env={"NUMBA_CACHE_DIR": str(where)},
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    stock = np.load(out)
    assert str(stock["pipeline"]) == "numba.core.compiler.Compiler"
    # every compiled function of the kernel was switched to numba's pipeline there
    assert int(stock["switched"]) == len(kernel_figures.kernel_dispatchers()) > 1
    assert simulate_chunk._compiler.pipeline_class is KernelCompiler  # here: ours
    compared: set[str] = set()
    rows = 0
    for label, model, batch in kernel_figures.cases():
        for name in ("device", "sizes", "axis"):
            key = f"{label}/mappings.{name}"
            assert np.array_equal(stock[key], getattr(batch, name)), key  # the same mappings
            compared.add(key)
        rows += int((batch.axis == kernel_figures.ROWS).any())
        for name, ours in kernel_figures.figures(model, batch).items():
            key = f"{label}/{name}"
            theirs = stock[key]
            assert (theirs.dtype, theirs.shape) == (ours.dtype, ours.shape), key
            assert theirs.tobytes() == ours.tobytes(), (
                f"{key}: the stock pipeline's figures differ from ours "
                f"(first at {np.argwhere(theirs != ours)[:1].tolist()})"
            )
            compared.add(key)
    # both variants of the kernel ran: with layers split by rows and without
    assert rows == int(stock["batches_with_rows"]) > 0
    assert rows < len({k.rsplit("/", 1)[0] for k in compared})
    assert compared == set(stock.files) - {"pipeline", "switched", "batches_with_rows"}
