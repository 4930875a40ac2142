"""Small hand-made platforms for tests."""

from __future__ import annotations

from models_analytical.platform import OP_CLASSES, Device, KindCoefficients, Link, Platform

RATE = 1e6  # MAC/s of every op class: a layer of n MACs takes n/1e6 s


def platform(
    n: int = 4,
    bw: float = 1e6,
    latency: float = 0.0,
    capacity: float = 1e4,
    power: float = 10.0,
    idle: float = 1.0,
    weights: str = "resident",
) -> Platform:
    """n CPUs on n hosts, one network link class, rate 1 MMAC/s, no per-layer overhead."""
    coeff = KindCoefficients(
        frequency_hz=RATE,
        layer={c: 1.0 for c in OP_CLASSES},
        layer_overhead_s=0.0,
        memory_coefficient=1.0,
        memory_bias_mb=0.0,
        memory_per_layer_mb=0.0,
        power_w={**{c: power for c in OP_CLASSES}, "overhead": 0.0, "idle": idle},
    )
    devices = tuple(Device(f"h{i}_cpu", f"h{i}", "cpu", 1, capacity) for i in range(n))
    return Platform(
        "test", devices, {"network": Link(latency, bw)}, {"cpu": coeff}, entry=0, weights=weights
    )
