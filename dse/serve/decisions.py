"""An adaptive service's decisions (:mod:`dse.serve.adaptive`): each a line of JSON in
``WORKDIR/decisions.jsonl`` (and of the ``dse`` logger), its figures in plain units (ms,
ratios and factors to four places), so a reader of the file sees what was measured and
predicted."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dse.serve.monitor import Window
from models_analytical.conditions import Conditions

LOG = logging.getLogger("dse")
#: The decision log in the work folder.
DECISIONS = "decisions.jsonl"


def logged(workdir: Path, entry: Mapping[str, Any]) -> None:
    """Append ``entry`` to the work folder's decision log, and say it to the logger."""
    line = json.dumps(entry)
    with open(workdir / DECISIONS, "a") as f:
        f.write(line + "\n")
    LOG.info("adapt: %s", line)


def period_s(ev: Any) -> np.ndarray:
    """[P] the model's pipelined period (s) of an evaluation's mappings."""
    from dse.objectives import OBJECTIVES

    return np.asarray(OBJECTIVES["period"].values(ev)) / 1e3


def rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def by_rank(d: Mapping[int, float]) -> dict[str, float]:
    return {str(k): round(v, 4) for k, v in d.items()}


def figures(w: Window) -> dict[str, Any]:
    return {
        "compute_ms": {str(r): round(s * 1e3, 3) for r, s in w.compute_s.items()},
        "period_ms": None if w.period_s is None else round(w.period_s * 1e3, 3),
        "latency_ms": round(w.latency_s * 1e3, 3),
    }


def conditions_of(c: Conditions) -> dict[str, Any]:
    return {
        "speed": {k: round(v, 4) for k, v in c.speed.items()},
        "network": round(c.network, 4),
        "ports": {k: round(v, 4) for k, v in c.ports.items()},
    }
