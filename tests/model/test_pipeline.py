"""The kernel's numba pipeline (models_analytical.schedule.pipeline): a stage inlined with its
copies forwarded and its namedtuple fields read once gives the numbers worked out by hand, and
a numba whose internals the pipeline replaces are not those it was written against stops it in
one line."""

from __future__ import annotations

import copy
import inspect
from typing import NamedTuple

import numba
import numba.core.inline_closurecall as inline_closurecall
import numpy as np
import pytest

from models_analytical.schedule.pipeline import KernelCompiler, ssa_by_mentions


class Pair(NamedTuple):
    a: np.ndarray
    b: np.ndarray


@numba.njit(inline="always")
def weighted(t, i, w):
    w = w * 2.0  # a parameter assigned again: its copy is not forwarded
    return t.a[i] * w + t.b[i]


def total(t, n):
    acc = 0.0
    for i in range(n):
        acc += weighted(t, i, 0.5) - t.a[i]  # a[i] * 1 + b[i] - a[i]: b[i]
        t.b[i] += 1.0
    return acc


@numba.njit(inline="always")
def nested(t, i):
    return weighted(t, i, 1.0) + weighted(t, i + 1, 0.25)  # a stage calling one twice


def twice(t, n):
    acc = 0.0
    for i in range(n - 1):
        acc += weighted(t, i, 0.5) * nested(t, i) - weighted(t, i + 1, 2.0)
    return acc


def test_inlined_stage_with_copies_forwarded_and_fields_read_once():
    compiled = numba.njit(pipeline_class=KernelCompiler)(total)
    pair = Pair(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0]))
    assert compiled(pair, 3) == 60.0  # 10 + 20 + 30
    assert pair.b.tolist() == [11.0, 21.0, 31.0]  # written through the field
    assert compiled(pair, 2) == 32.0  # 11 + 21
    assert pair.b.tolist() == [12.0, 22.0, 31.0]
    done = compiled.overloads[compiled.signatures[0]].metadata["dse_pipeline"]
    # the stage's t and i bound to the caller's by copies (w is assigned again: kept)
    assert done["copies_forwarded"] >= 2
    # four reads of a field (a and b in the stage, a and b in the loop) made two, hoisted
    assert done["field_reads_hoisted"] == 4
    assert inline_closurecall.copy is copy  # numba's module back after inlining


def test_same_numbers_as_numbas_own_pipeline():
    ours = numba.njit(pipeline_class=KernelCompiler)(total)
    plain = numba.njit(total)
    rng = np.random.default_rng(1)
    a, b = rng.random(50), rng.random(50)
    p1, p2 = Pair(a.copy(), b.copy()), Pair(a.copy(), b.copy())
    assert ours(p1, 50) == plain(p2, 50)
    assert p1.b.tolist() == p2.b.tolist()


def test_a_stage_inlined_at_several_sites_and_inside_another_stage():
    """Each call site gets its own copy of the stage's IR (the pass inlines blocks uncopied):
    the same number as numba's pipeline and as the sum worked out here, term by term."""
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])

    def by_hand(i):
        w = lambda j, w: a[j] * w * 2.0 + b[j]  # noqa: E731 - weighted, as written above
        return w(i, 0.5) * (w(i, 1.0) + w(i + 1, 0.25)) - w(i + 1, 2.0)

    expected = by_hand(0) + by_hand(1)
    assert expected == (11 * 33 - 28) + (22 * 55.5 - 42)  # 1514
    ours = numba.njit(pipeline_class=KernelCompiler)(twice)
    assert ours(Pair(a, b), 3) == expected
    assert numba.njit(twice)(Pair(a, b), 3) == expected


def test_in_cache_says_whether_a_first_call_compiles(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "kernel_here.py").write_text(
        "from models_analytical.schedule.compiled import compiled\n\n"
        "@compiled\ndef twice(x):\n    return 2 * x\n"
    )
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from kernel_here import twice\n"
        "from models_analytical.schedule.compiled import in_cache\n"
        "from numba import types\n"
        "def ints(sig): return sig == (types.int64,)\n"
        "def floats(sig): return sig == (types.float64,)\n"
        "before = in_cache(twice); twice(3)\n"
        "print(before, in_cache(twice), in_cache(twice, ints), in_cache(twice, floats))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> str:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    # cold: the first call compiles, then it is cached, for integers only
    assert run() == "False True True False"
    assert run() == "True True True False"  # a later process finds it


def test_the_kernel_in_cache_with_and_without_rows(monkeypatch):
    """The kernel's two specialisations told apart by the type of ``with_rows`` in the keys
    of numba's index (a key: the signature first)."""
    from numba import types

    from models_analytical.schedule import kernel

    at = list(inspect.signature(kernel.simulate_chunk.py_func).parameters).index("with_rows")

    def index_of(*row_types):
        keys = {}
        for t in row_types:
            sig = [types.int64] * 15
            sig[at] = t
            keys[(tuple(sig), "magic")] = "file"
        return keys

    cache_file = kernel.simulate_chunk._cache._cache_file
    for row_types, expected in [
        ((), (False, False)),
        ((types.none,), (True, False)),
        ((types.boolean,), (False, True)),
        ((types.none, types.boolean), (True, True)),
    ]:
        monkeypatch.setattr(cache_file, "_load_index", lambda r=row_types: index_of(*r))
        assert (kernel.kernel_in_cache(False), kernel.kernel_in_cache(True)) == expected


def test_a_kernel_numba_cannot_cache_gets_numbas_warning_not_a_crash():
    """numba declines to cache code with dynamic globals (the kernel compiled with
    NUMBA_OPT=0 has some) and warns naming the file its cache locator gives: ours must have
    one (it had none: the kernel raised AttributeError instead of running uncached)."""
    import warnings
    from types import SimpleNamespace

    from numba.core.errors import NumbaWarning

    from models_analytical.schedule import kernel
    from models_analytical.schedule.compiled import KernelCacheLocator

    impl = kernel.simulate_chunk._cache._impl
    assert isinstance(impl.locator, KernelCacheLocator)
    declined = SimpleNamespace(
        lifted=(),
        library=SimpleNamespace(has_dynamic_globals=True),
        fndesc=SimpleNamespace(qualname="simulate_chunk"),
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert impl.check_cachable(declined) is False
    said = [str(w.message) for w in seen if issubclass(w.category, NumbaWarning)]
    assert len(said) == 1
    assert 'Cannot cache compiled function "simulate_chunk" as it uses dynamic globals' in said[0]
    assert seen[0].filename.endswith("kernel.py")


def branches(x, n):
    """Variables assigned in several blocks, in loops and branches, some read after them."""
    acc = 0.0
    best = -1
    for i in range(n):
        y = x[i]
        if y > 0.5:
            acc += y
            best = i
        elif y < 0.1:
            y = -y
            acc -= y
        else:
            for j in range(i):
                acc += x[j] * y
                y = y * 0.5
    if best < 0:
        acc = -acc
    return acc, best, y


def test_ssa_by_mentions_gives_the_ir_numbas_ssa_gives():
    """numba's SSA reconstruction and ours, on two fresh copies of one function's IR: the
    same IR, statement for statement (dumped as text, variable versions included)."""
    import io
    from contextlib import redirect_stdout

    from numba.core import ssa
    from numba.core.compiler import run_frontend

    def dumped(run) -> str:
        func_ir = run_frontend(branches)
        func_ir.blocks = run(func_ir.blocks)
        out = io.StringIO()
        with redirect_stdout(out):
            func_ir.dump()
        return out.getvalue()

    theirs = dumped(ssa._run_ssa)
    assert "phi" in theirs and "y.1" in theirs  # there was SSA work to do
    assert dumped(ssa_by_mentions) == theirs
    x = np.array([0.7, 0.05, 0.3, 0.9, 0.2])
    compiled = numba.njit(pipeline_class=KernelCompiler)(branches)
    assert compiled(x, 5) == numba.njit(branches)(x, 5) == branches(x, 5)


@pytest.fixture
def fresh_check():
    """check_numba's verdict forgotten before and after the test (numba as the test leaves it)."""
    from models_analytical.schedule.pipeline import check_numba

    check_numba.cache_clear()
    yield check_numba
    check_numba.cache_clear()


def test_numba_is_a_release_the_pipeline_was_checked_against():
    """The numba installed has the internals the pipeline was written against, its version is
    within NUMBA_PIN, and pyproject.toml pins numba to NUMBA_PIN."""
    import re
    from pathlib import Path

    from models_analytical.schedule.pipeline import NUMBA_PIN, numba_mismatch

    assert numba_mismatch() is None
    bounds = re.fullmatch(r">=(\d+)\.(\d+),<(\d+)\.(\d+)", NUMBA_PIN)
    low, high = [tuple(map(int, bounds.group(i, i + 1))) for i in (1, 3)]
    assert low <= tuple(int(v) for v in numba.__version__.split(".")[:2]) < high
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.findall(r'"numba([^"]*)"', pyproject) == [NUMBA_PIN]


def test_changed_numba_internals_stop_the_pipeline_in_one_line(monkeypatch, fresh_check):
    """Where a numba function the pipeline replaces or relies on is not the one it was written
    against (changed, or gone), the first compilation through it fails with one line naming
    the function and the releases to install, not a traceback from inside numba's passes;
    numba's own pipeline still compiles."""
    from numba.core import ssa

    from dse.errors import DseError
    from models_analytical.schedule.pipeline import NUMBA_PIN, numba_mismatch

    theirs = ssa._run_ssa

    def _run_ssa(blocks):  # what a later numba might hold: another body
        return theirs(blocks)

    monkeypatch.setattr(ssa, "_run_ssa", _run_ssa)
    assert numba_mismatch() == "numba.core.ssa._run_ssa has changed"
    with pytest.raises(DseError) as failed:
        numba.njit(pipeline_class=KernelCompiler)(branches)(np.ones(3), 3)
    said = str(failed.value)
    assert "\n" not in said
    assert "numba.core.ssa._run_ssa has changed" in said
    assert f"pip install 'numba{NUMBA_PIN}'" in said
    assert numba.njit(branches)(np.ones(3), 3) == branches(np.ones(3), 3)
    monkeypatch.undo()
    monkeypatch.delattr(inline_closurecall.InlineWorker, "inline_function")
    assert (
        numba_mismatch() == "numba.core.inline_closurecall.InlineWorker.inline_function is missing"
    )
    monkeypatch.undo()
    monkeypatch.setattr(inline_closurecall, "copy", copy.copy)
    assert numba_mismatch() == "numba.core.inline_closurecall no longer imports the copy module"
    monkeypatch.undo()
    assert numba_mismatch() is None
