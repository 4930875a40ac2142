"""Small hand-made platforms and coefficients for tests."""

from __future__ import annotations

from dse.net.graph import LayerGraph
from dse.platform import Device, Link, Platform
from models_analytical.coefficients import OP_CLASSES, Coefficients, Memory, TypeCoefficients
from models_analytical.model import AnalyticalModel

RATE = 1e6  # MAC/s of every op class: a layer of n MACs takes n/1e6 s


def platform(
    n: int = 4,
    bw: float = 1e6,
    latency: float = 0.0,
    capacity: float = 1e4,
    weights: str = "resident",
) -> Platform:
    """n CPUs on n hosts, one network link class."""
    devices = tuple(Device(f"h{i}_cpu", f"h{i}", "cpu", 1, capacity) for i in range(n))
    return Platform("test", devices, {"network": Link(latency, bw)}, entry=0, weights=weights)


def coefficients(power: float = 10.0, idle: float = 1.0, rate: float = RATE) -> Coefficients:
    """Rate 1 MMAC/s for every op class, no per-layer overhead, memory = liveness peak."""
    return Coefficients(
        {
            "cpu": TypeCoefficients(
                frequency_hz=rate,
                layer={c: 1.0 for c in OP_CLASSES},
                layer_overhead_s=0.0,
                memory=Memory(coefficient=1.0, bias_mb=0.0, per_layer_mb=0.0),
                power_w={**{c: power for c in OP_CLASSES}, "overhead": 0.0, "idle": idle},
            )
        }
    )


def model(graph: LayerGraph, plat: Platform, **coeff: float) -> AnalyticalModel:
    return AnalyticalModel(graph, plat, coefficients(**coeff))
