"""The whole model beside a deployment: where it is, its session, and its outputs on the plan's
input (computed once per model file and input, and cached), the reference a run is checked
against.

Only the launching machine runs these; a rank reads the outputs from its deployment
(:mod:`dse.runtime.deployment.expected`). ``dse.net`` is imported where it is needed, not at
import, so that what a rank imports stays free of numba.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from dse.records import to_json
from dse.runtime.deployment.plan import Plan, Reference, input_arrays
from dse.runtime.rank.sessions import session

if TYPE_CHECKING:
    from dse.net import Net


def reference(net: Net, seed: int) -> Reference:
    """Where the whole model is (the equivalence check's reference, the speed probe's work)."""
    from dse.net import zoo  # not at import: see the module's docstring

    path = net.path if net.path is not None else zoo.materialize(net.name, seed)
    shape = net.input_shape  # checked at load: one shape, or input name -> shape
    if shape is None or isinstance(shape, list | dict | str | int):
        return Reference(str(path), shape)
    return Reference(str(path), dict(shape) if isinstance(shape, Mapping) else list(shape))


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
    and cached (``<zoo cache>/reference/<key>.npz``): building the whole-model session costs
    seconds for a large network, and fidelity and calibration deploy each network several
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
        arrays = {f"o{i}": np.asarray(e) for i, e in enumerate(expected)}
        # numpy's stub lets **kwds fill allow_pickle: bool, so a dict of arrays fails it
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, cache)
    except OSError:
        pass  # no cache: computed again next time
    return expected
