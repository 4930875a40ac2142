"""The equivalence check: a run's outputs against the whole model's in onnxruntime.

The whole model's outputs on the plan's input are stored in the deployment
(:func:`dse.runtime.deployment.reader.read_expected`), so rank 0 checks a run wherever it runs (a
board need not hold the whole model). Outputs must agree to ``max|a - b| <= RTOL * max|b| +
ATOL``; a run whose outputs cannot be checked is not a valid measurement either.

``ATOL`` is for outputs whose values are all near 0 (a text detector's probability map on a
photo without text: at most 1.2e-5): there float rounding, amplified through a deep network
whose every layer is split, is a large share of the largest value (1.5e-7 of 1.2e-5) while
a wrong cut changes the outputs by far more than 1e-6.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dse.errors import DseError
from dse.runtime.deployment.measurements import Equivalence
from dse.runtime.deployment.plan import Plan
from dse.runtime.deployment.reader import read_expected

#: Outputs must agree to max|a - b| <= RTOL * max|b| + ATOL.
RTOL = 1e-4
ATOL = 1e-6
DEFINITION = (
    "max|partitioned - whole| / max|whole| over each output; passes at most 1e-4 x max|whole| "
    "+ 1e-6 apart"
)


def equivalence(plan: Plan, outputs: dict[str, np.ndarray], directory: Path) -> Equivalence:
    """The partitioned outputs against the whole model's (stored in ``directory``)."""
    try:
        expected = read_expected(plan, directory)
    except DseError as exc:
        return Equivalence(None, f"not checked: {exc}")
    abs_err = rel_err = 0.0
    within = True
    for o, r in zip(plan.outputs, expected, strict=True):
        got = np.asarray(outputs[o.name], dtype=np.float64)
        if not np.isfinite(r).all():
            return Equivalence(None, f"the whole model's output '{o.name}' is not finite")
        if not np.isfinite(got).all():
            why = f"output '{o.name}' holds NaN or infinity"
            return Equivalence(False, why, tolerance_rel=RTOL, definition=DEFINITION)
        diff = float(np.abs(got - r).max()) if r.size else 0.0
        scale = float(np.abs(r).max()) if r.size else 0.0
        abs_err = max(abs_err, diff)
        rel_err = max(rel_err, diff / scale if scale > 0 else diff)
        within = within and diff <= RTOL * scale + ATOL
    return Equivalence(
        passed=math.isfinite(rel_err) and within,
        max_abs_error=abs_err,
        max_rel_error=rel_err,
        tolerance_rel=RTOL,
        definition=DEFINITION,
    )


def verdict(eq: Equivalence) -> str | None:
    """Why a run with this equivalence is failed, or None when it passed."""
    if eq.passed is True:
        return None
    if eq.passed is None:
        return f"outputs not checked against the whole model: {eq.reason}"
    if eq.max_rel_error is None:
        return f"outputs differ from the whole model: {eq.reason}"
    return (
        f"outputs differ from the whole model: max rel error {eq.max_rel_error:.3g} > {RTOL:g} "
        f"(max abs error {eq.max_abs_error:.3g}, {ATOL:g} allowed beside)"
    )
