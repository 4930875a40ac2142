"""The objective registry: every objective's name, unit, display scale and how it is computed.

An objective is computed from *figures*: anything with the per-mapping and per-device arrays
below, in SI-like units (seconds, MB, joules, bytes). The analytical model's
:class:`~models_analytical.model.Evaluation` has them, and so will a measurement, so predicted
and measured objectives are computed by the same code.

* ``latency_s [P]`` end-to-end time of one inference;
* ``busy_s, comm_s, span_s, memory_mb, energy_j, bytes_sent [P, D]`` per device (``span_s``:
  from the device's first step of an inference to the end of its last work, waits included).

Values shown to users are ``value x scale`` in ``unit``; the search minimises those too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.errors import DseError


@dataclass(frozen=True)
class Objective:
    name: str
    unit: str
    scale: float  # display value = figure x scale
    label: str  # what the number is, for tables, axes and reports
    of: Callable[[Any], np.ndarray]  # figures -> [P] in SI-like units
    decimals: int = 2  # shown in tables (report.html): 0.01 ms, 0.1 MB, 1 mJ

    @property
    def column(self) -> str:
        """CSV column / JSON key: ``latency_ms``, ``memory_MB``, ..."""
        return f"{self.name}_{self.unit}"

    def values(self, figures: Any) -> np.ndarray:
        """[P] in display units."""
        return np.asarray(self.of(figures), dtype=np.float64) * self.scale


def _register(*objectives: Objective) -> dict[str, Objective]:
    return {o.name: o for o in objectives}


#: Objectives the search can minimise; the thesis's three come first.
OBJECTIVES: dict[str, Objective] = _register(
    Objective("latency", "ms", 1e3, "end-to-end latency", lambda f: f.latency_s),
    Objective("memory", "MB", 1.0, "peak memory, fullest device", lambda f: f.memory_mb.max(1), 1),
    Objective("energy", "J", 1.0, "energy, busiest device", lambda f: f.energy_j.max(1), 3),
    Objective("total_energy", "J", 1.0, "energy, all devices", lambda f: f.energy_j.sum(1), 3),
    Objective("bytes", "MB", 1e-6, "data sent, all links", lambda f: f.bytes_sent.sum(1)),
    Objective(
        "period",
        "ms",
        1e3,
        "pipelined period, slowest device or link",
        lambda f: np.minimum(  # back to back, never slower than one after another
            f.latency_s, np.maximum.reduce([f.span_s.max(1), f.busy_s.max(1), f.comm_s.max(1)])
        ),
    ),
)


def check_objectives(names: Any) -> list[str]:
    """The chosen objective names, validated: a non-empty list of distinct known names."""
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise DseError(
            f"objectives must be a non-empty list, e.g. objectives=[latency,memory], not {names!r}"
        )
    names = [str(n) for n in names]
    for n in names:
        if n not in OBJECTIVES:
            raise DseError(f"unknown objective '{n}': choose from {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise DseError(f"objectives {names} name one objective twice: list each once")
    return names


def values(names: Sequence[str], figures: Any) -> np.ndarray:
    """[P, len(names)] objective values in display units."""
    return np.column_stack([OBJECTIVES[n].values(figures) for n in names])


def rounded(name: str, value: float) -> str:
    """``71.23``: a value in display units to the objective's table precision."""
    return f"{value:.{OBJECTIVES[name].decimals}f}"


def fmt(name: str, value: float) -> str:
    """``12.3 ms``: a value in display units with its unit."""
    return f"{value:.4g} {OBJECTIVES[name].unit}"
