"""The whole model's outputs stored in a deployment (``expected.npz``), the reference every run's
outputs are checked against: written at deployment, read by the rank that checks a run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.errors import DseError
from dse.runtime.deployment.plan import Plan
from dse.runtime.deployment.reader import inside


def write_expected(path: Path, arrays: list[np.ndarray]) -> None:
    """The whole model's outputs, in the order of the plan's outputs, to ``path``."""
    named = {f"o{i}": np.asarray(a) for i, a in enumerate(arrays)}
    # numpy's stub lets **kwds fill allow_pickle: bool, so a dict of arrays fails it
    np.savez(path, **named)  # type: ignore[arg-type]


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
