"""The equivalence check: a deployment's outputs against the whole model's in onnxruntime.

At deployment the whole model runs once in onnxruntime on the plan's seeded input and its
outputs are stored in the deployment directory (``expected.npz``, :data:`~dse.runtime.plan.
EXPECTED`), so rank 0 checks a run wherever it runs (a board need not hold the whole model).
Outputs must agree to ``max|a - b| <= RTOL * max|b|`` (see tests/test_runtime_partition.py);
a run whose outputs cannot be checked is not a valid measurement either.

A rank imports this module for its check, so the deployment's helpers import ``dse.net`` where
they need it: ``dse.net`` brings numba and llvmlite, whose library alone put 36-88 MB of file
pages (as many as the page cache happened to map) into every rank's start.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from dse.errors import DseError
from dse.records import to_json
from dse.runtime.measurements import Equivalence
from dse.runtime.plan import Plan, input_arrays
from dse.runtime.reader import inside
from dse.runtime.sessions import session

#: Outputs must agree to max|a - b| <= RTOL * max|b| (see tests/test_runtime_partition.py).
RTOL = 1e-4
DEFINITION = "max|partitioned - whole| / max|whole| over each output"


def whole_model_session(plan: Plan, path: Path, threads: int = 1) -> Any:
    """The whole model of a deployment (``plan.reference``) in one cpu session."""
    from dse.net.onnx_load import fix_input_shapes  # not at import: see the module's docstring

    shape = plan.reference.input_shape if plan.reference is not None else None
    if shape is None:
        model: Any = path  # onnxruntime reads the file itself: no protobuf copy
    else:
        model = onnx.load(path, load_external_data=True)
        fix_input_shapes(model, shape)
    return session(model, "cpu", threads)


def reference_outputs(plan: Plan, path: Path, names: list[str]) -> list[np.ndarray]:
    """The whole model's outputs on the plan's input, computed once per (model file, input)
    and cached (``<zoo cache>/reference/<key>.npz``): building the whole-model session took
    8 s of a 23 s VGG-16 run, and fidelity and calibration deploy each network several
    times."""
    from dse.net.zoo.materialize import cache_root  # not at import: see the module's docstring

    st = path.stat()
    spec: list[Any] = [str(path.resolve()), st.st_size, st.st_mtime_ns, plan.seed]
    shape = plan.reference.input_shape if plan.reference is not None else None
    spec += [[to_json(p) for p in plan.inputs], shape, names]
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    cache = cache_root() / "reference" / f"{key[:32]}.npz"
    try:
        with np.load(cache, allow_pickle=False) as z:
            return [z[f"o{i}"] for i in range(len(names))]
    except (OSError, KeyError, ValueError):
        pass
    expected = whole_model_session(plan, path).run(names, input_arrays(plan))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **{f"o{i}": np.asarray(e) for i, e in enumerate(expected)})
        os.replace(tmp, cache)
    except OSError:
        pass  # no cache: computed again next time
    return expected


def write_expected(path: Path, arrays: list[np.ndarray]) -> None:
    """The whole model's outputs, in the order of the plan's outputs, to ``path``."""
    np.savez(path, **{f"o{i}": np.asarray(a) for i, a in enumerate(arrays)})


def read_expected(plan: Plan, directory: Path) -> list[np.ndarray]:
    """The whole model's outputs stored in the deployment, each of its output's shape and type
    (one line otherwise)."""
    if plan.reference is None:
        raise DseError("the plan names no reference")
    path = inside(directory, plan.reference.expected, "the whole model's expected outputs")
    limit = sum(o.spec.nbytes for o in plan.outputs) + 2**20  # the arrays and npz headers
    if path.stat().st_size > limit:
        raise DseError(f"{path} is larger than the plan's outputs")
    out = []
    try:
        with np.load(path, allow_pickle=False) as z:
            for i, o in enumerate(plan.outputs):
                a = z[f"o{i}"]
                if a.shape != o.shape or a.dtype != np.dtype(o.dtype):
                    raise DseError(f"{path}: output '{o.name}' is not {o.dtype}{list(o.shape)}")
                out.append(a)
    except (OSError, KeyError, ValueError) as exc:
        raise DseError(f"{path} is not the whole model's outputs: {exc}") from None
    return out


def equivalence(plan: Plan, outputs: dict[str, np.ndarray], directory: Path) -> Equivalence:
    """The partitioned outputs against the whole model's (stored in ``directory``)."""
    try:
        expected = read_expected(plan, directory)
    except DseError as exc:
        return {"passed": None, "reason": f"not checked: {exc}"}
    abs_err = rel_err = 0.0
    for o, r in zip(plan.outputs, expected, strict=True):
        got = np.asarray(outputs[o.name], dtype=np.float64)
        if not np.isfinite(r).all():
            return {"passed": None, "reason": f"the whole model's output '{o.name}' is not finite"}
        if not np.isfinite(got).all():
            return {
                "passed": False,
                "reason": f"output '{o.name}' holds NaN or infinity",
                "tolerance_rel": RTOL,
                "definition": DEFINITION,
            }
        diff = float(np.abs(got - r).max()) if r.size else 0.0
        scale = float(np.abs(r).max()) if r.size else 0.0
        abs_err = max(abs_err, diff)
        rel_err = max(rel_err, diff / scale if scale > 0 else diff)
    return {
        "passed": math.isfinite(rel_err) and rel_err <= RTOL,
        "max_abs_error": abs_err,
        "max_rel_error": rel_err,
        "tolerance_rel": RTOL,
        "definition": DEFINITION,
    }


def verdict(eq: Equivalence) -> str | None:
    """Why a run with this equivalence is failed, or None when it passed."""
    if eq.get("passed") is True:
        return None
    if eq.get("passed") is None:
        return f"outputs not checked against the whole model: {eq.get('reason')}"
    if "max_rel_error" not in eq:
        return f"outputs differ from the whole model: {eq.get('reason')}"
    return (
        f"outputs differ from the whole model: max rel error {eq['max_rel_error']:.3g} > {RTOL:g}"
    )
