"""`python -m dse.evaluate +net=NAME mapping=mapping.json`: score one mapping with the model."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import json
import sys
from typing import Any

import hydra
from omegaconf import DictConfig

from dse import app
from dse.cli import guarded, output_format, run
from dse.errors import DseError
from dse.files import finite
from dse.mapping.autodice import read_autodice
from dse.objectives import OBJECTIVES
from dse.paths import CONF_DIR
from dse.platform import Platform
from dse.records import to_json


def as_table(net: str, platform: Platform, r: dict[str, Any], coefficients: str) -> str:
    """The prediction ``r`` as a table, under its status and ``coefficients`` (where the
    figures come from: :func:`dse.app.coefficients_origin`)."""
    o = r["objectives"]
    summary = " | ".join(
        f"{OBJECTIVES[n].label} {o[OBJECTIVES[n].column]:.4g} {OBJECTIVES[n].unit}"
        for n in OBJECTIVES
    )
    head = (
        "device",
        "compute ms",
        "comm ms",
        "idle ms",
        "memory MB",
        "capacity",
        "energy J",
        "bytes sent",
    )
    rows = [
        (
            d,
            f"{r['compute_ms'][d]:.3f}",
            f"{r['communication_ms'][d]:.3f}",
            f"{r['idle_ms'][d]:.3f}",
            f"{r['memory_mb'][d]:.1f}",
            f"{r['capacity_mb'][d]:.0f}",
            f"{r['energy_j'][d]:.4f}",
            f"{r['bytes_sent'][d]:,.0f}",
        )
        for d in r["memory_mb"]
    ]
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    status = "feasible" if r["feasible"] else "INFEASIBLE: a device is over its memory capacity"
    return "\n".join(
        [
            f"{net} on {platform.name}: {status}",
            f"coefficients: {coefficients}",
            summary,
            "",
            line(head),
            line(tuple("-" * w for w in widths)),
            *map(line, rows),
            "",
            "compute, comm and idle overlap (transfers run while devices compute or wait), so "
            "they do not add up to the latency; energy is modelled, not measured.",
        ]
    )


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    fmt = output_format(cfg)
    if not cfg.get("mapping"):
        raise DseError(
            "no mapping given: add mapping=path/mapping.json "
            "(and horizontal=path/horizontal.json for split layers)"
        )
    net, platform, model = app.model_from(cfg)
    graph = net.graph
    horizontal = cfg.get("horizontal") or None
    chosen = read_autodice(graph, platform.keys, platform.name, cfg.mapping, horizontal)
    r = to_json(model.evaluate(chosen).prediction(platform))
    c = model.coefficients
    r |= {"coefficients": str(app.coefficients_path(cfg)), "calibration": c.calibration}
    text = json.dumps(finite(r), indent=1, allow_nan=False)
    origin = app.coefficients_origin(cfg, c)
    print(text if fmt == "json" else as_table(graph.name, platform, r, origin))
    unseen = app.unprofiled_warning(net, platform, c)
    if unseen:
        print(unseen, file=sys.stderr)
    return r


if __name__ == "__main__":
    run(main, "evaluate")
