"""`python -m dse.evaluate +net=NAME mapping=mapping.json`: score one mapping with the model."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import json
import math
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from dse import app
from dse.cli import CONF_DIR, guarded, output_format, run
from dse.errors import DseError
from dse.mapping import from_autodice
from dse.objectives import OBJECTIVES
from dse.platform import Platform
from models_analytical.model import Evaluation

#: Largest mapping or horizontal file read (a mapping of 100k layers is a few MB).
MAX_JSON_BYTES = 64 * 2**20


def read_json(path: str, what: str) -> Any:
    """A JSON file's content, or one line saying why it cannot be read: missing, not a regular
    file, too large, not UTF-8, not JSON, nested too deeply, NaN/Infinity, or a key twice."""
    p = Path(str(path)).expanduser()
    try:
        if not p.exists():
            raise DseError(f"{what} file not found: {p}")
        if not p.is_file():
            raise DseError(f"{what} file {p} is not a regular file (a directory, device or pipe)")
        size = p.stat().st_size
        if size > MAX_JSON_BYTES:
            raise DseError(
                f"{what} file {p} is {size / 2**20:.0f} MB: a {what} file is at most "
                f"{MAX_JSON_BYTES // 2**20} MB"
            )
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DseError(
            f"{what} file {p} is not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from None
    except (OSError, RuntimeError) as exc:
        raise DseError(f"cannot read {what} file {p}: {exc.__class__.__name__}") from None
    if not text.strip():
        raise DseError(f"{what} file {p} is empty: it must hold a JSON object")
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise DseError(f"{what} file {p} is not valid JSON: {exc}") from None
    except RecursionError:
        raise DseError(f"{what} file {p} is nested too deeply to be a {what}") from None
    except ValueError as exc:
        raise DseError(f"{what} file {p}: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (write a number)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key '{k}' appears twice (list its entries once)")
        out[k] = v
    return out


def finite(value: Any) -> Any:
    """``value`` with every non-finite float as None, so the JSON printed is valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def report(platform: Platform, ev: Evaluation) -> dict[str, Any]:
    """The evaluation of mapping 0 as plain numbers (ms, MB, J), used devices only."""
    used = [i for i in range(len(platform)) if ev.used[0, i]]
    keys = platform.keys

    def per_device(values, scale: float = 1.0, digits: int = 4) -> dict[str, float]:
        return {keys[i]: round(float(values[0, i]) * scale, digits) for i in used}

    return {
        "latency_ms": round(float(ev.latency_s[0]) * 1e3, 4),
        "memory_mb": per_device(ev.memory_mb, digits=3),
        "energy_j": per_device(ev.energy_j, digits=5),
        "feasible": bool(ev.feasible[0]),
        "compute_ms": per_device(ev.busy_s, 1e3),
        "communication_ms": per_device(ev.comm_s, 1e3),
        "idle_ms": per_device(ev.idle_s, 1e3),
        "bytes_sent": per_device(ev.bytes_sent, digits=0),
        "capacity_mb": {keys[i]: platform.devices[i].memory_mb for i in used},
        "objectives": {o.column: round(float(o.values(ev)[0]), 6) for o in OBJECTIVES.values()},
    }


def as_table(net: str, platform: Platform, r: dict[str, Any]) -> str:
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
    mapping = read_json(cfg.mapping, "mapping")
    horizontal = read_json(cfg.horizontal, "horizontal") if cfg.get("horizontal") else None
    batch = from_autodice(graph, platform.keys, mapping, horizontal)
    r = report(platform, model.evaluate(batch))
    text = json.dumps(finite(r), indent=1, allow_nan=False)
    print(text if fmt == "json" else as_table(graph.name, platform, r))
    return r


if __name__ == "__main__":
    run(main, "evaluate")
