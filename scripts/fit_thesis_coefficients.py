"""Fit the Xavier NX CPU coefficients to the thesis's unpartitioned measurements (Table 2).

    python scripts/fit_thesis_coefficients.py [--write]

One set of coefficients for all networks. Fixed from hardware facts rather than fitted: the
CPU frequency (1.4 GHz, the 6-core mode) and the rates of memory-bound layers (fully connected
layers stream 4 bytes of weight per MAC; elementwise layers move about 8 bytes per element),
taken at 20 GB/s of achievable DRAM bandwidth. Fitted by non-negative least squares on
relative error: the Winograd and other convolution coefficients and the per-layer overhead
(latency), the memory coefficient, bias and per-layer term (Eq. 4.9), and the power drawn in
compute, memory-bound and overhead time (energy). The GPU has no figures in the thesis; its
values are documented assumptions. Prints predicted against measured values; --write updates
conf/platform/jetson_xavier_nx.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dse.mapping import from_device_lists
from dse.net import load_net
from dse.platform import load_platform
from models_analytical.calibration import fit_nonnegative
from models_analytical.coefficients import OP_CLASSES, Coefficients
from models_analytical.layer_costs import op_class
from models_analytical.model import AnalyticalModel

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf" / "platform"
OUT = CONF / "jetson_xavier_nx.json"

# Table 2 of the thesis: unpartitioned, one Xavier NX CPU (6 cores).
TABLE2 = {  # net: (latency s, peak memory MB, energy J)
    "alexnet": (28.3e-3, 152.746, 0.352),
    "vgg16": (122.46e-3, 446.852, 1.959),
    "densenet121": (138.68e-3, 95.969, 1.026),
}
CPU_HZ = 1.4e9
DRAM_BPS = 20e9
FIXED_RATE = {"fc": DRAM_BPS / 4, "elementwise": DRAM_BPS / 8}  # MAC/s of memory-bound classes

GPU = {  # assumptions (the thesis gives no GPU figures): 384 Volta cores at 1.1 GHz
    "frequency_hz": 1.1e9,
    "layer": {"conv_winograd": 300.0, "conv": 120.0, "fc": 30.0 / 4, "elementwise": 30.0 / 8},
    "layer_overhead_s": 1.2e-4,
    "memory": {"coefficient": 1.0, "bias_mb": 250.0, "per_layer_mb": 0.2},
    "power_w": {
        "conv_winograd": 9.0,
        "conv": 9.0,
        "fc": 6.0,
        "elementwise": 6.0,
        "overhead": 3.0,
        "idle": 0.5,
    },
}
GPU_NOTE = (
    "GPU values are assumptions, not measurements: 384 Volta cores at 1.1 GHz reach "
    "~330 GMAC/s on Winograd convolutions and ~130 GMAC/s on others, memory-bound "
    "layers get 30 GB/s, a CUDA context costs ~250 MB, and the GPU rail draws 3-9 W "
    "when busy. Replace them by calibrating on the hardware."
)


def class_macs(graph) -> np.ndarray:
    classes = np.array([op_class(layer) for layer in graph])
    return np.array([graph.macs[classes == c].sum() for c in OP_CLASSES], dtype=np.float64)


def fit(platform_cfg: dict) -> dict:
    graphs = {n: load_net({"name": n}).graph for n in TABLE2}
    latency = np.array([v[0] for v in TABLE2.values()])
    memory = np.array([v[1] for v in TABLE2.values()])
    energy = np.array([v[2] for v in TABLE2.values()])

    macs = np.array([class_macs(g) for g in graphs.values()])  # [net, class]
    layers = np.array([len(g) for g in graphs.values()], dtype=np.float64)
    fixed_s = sum(macs[:, OP_CLASSES.index(c)] / r for c, r in FIXED_RATE.items())
    wino, conv = OP_CLASSES.index("conv_winograd"), OP_CLASSES.index("conv")
    x = fit_nonnegative(np.column_stack([macs[:, wino], macs[:, conv], layers]), latency - fixed_s)
    rate = {"conv_winograd": 1 / x[0], "conv": 1 / x[1], **FIXED_RATE}
    overhead = float(x[2])

    # power per op class: Winograd and other convolutions apart, memory-bound layers (fc and
    # elementwise) together; during per-layer overhead (dispatch, sync) the cores wait, idle
    t_over = layers * overhead
    idle_w = 1.0
    power = fit_nonnegative(
        np.column_stack([macs[:, wino] * x[0], macs[:, conv] * x[1], fixed_s]),
        energy - t_over * idle_w,
    )

    cpu = {
        "frequency_hz": CPU_HZ,
        "layer": {c: rate[c] / CPU_HZ for c in OP_CLASSES},
        "layer_overhead_s": overhead,
        "memory": {"coefficient": 1.0, "bias_mb": 0.0, "per_layer_mb": 0.0},
        "power_w": {
            "conv_winograd": power[0],
            "conv": power[1],
            "fc": power[2],
            "elementwise": power[2],
            "overhead": idle_w,
            "idle": idle_w,
        },
    }
    # raw liveness peak of each network on one CPU, from the model itself
    raw_peak, parts = [], []
    coeffs = Coefficients.from_dict({"cpu": cpu, "gpu": GPU})
    plat = load_platform(platform_cfg)
    for g in graphs.values():
        ev = AnalyticalModel(g, plat, coeffs).evaluate(
            from_device_lists(g, len(plat), [[[plat.entry]] * len(g)])
        )
        raw_peak.append(ev.memory_mb[0, plat.entry])
        parts.append(len(g))
    m = fit_nonnegative(np.column_stack([raw_peak, np.ones(3), parts]), memory)
    cpu["memory"] = {"coefficient": m[0], "bias_mb": m[1], "per_layer_mb": m[2]}
    return {
        "description": "Jetson Xavier NX: CPU fitted to the thesis's Table 2 by "
        "scripts/fit_thesis_coefficients.py; " + GPU_NOTE,
        "cpu": cpu,
        "gpu": GPU,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = ap.parse_args()
    import yaml

    cfg = yaml.safe_load((CONF / "jetson_xavier_nx_x8.yaml").read_text())
    coeffs = fit(cfg)
    cpu = coeffs["cpu"]
    print(
        "cpu rates (GMAC/s):",
        {c: round(float(v) * CPU_HZ / 1e9, 2) for c, v in cpu["layer"].items()},
        f"overhead {cpu['layer_overhead_s'] * 1e3:.3f} ms/layer",
    )
    print(
        "cpu memory:",
        {k: round(float(v), 4) for k, v in cpu["memory"].items()},
        "power W:",
        {k: round(float(v), 2) for k, v in cpu["power_w"].items()},
    )
    if args.write:
        OUT.write_text(json.dumps(coeffs, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
        plat = load_platform(cfg)
        fitted = Coefficients.from_dict(coeffs)
        for net, (lat, mem, en) in TABLE2.items():
            g = load_net({"name": net}).graph
            ev = AnalyticalModel(g, plat, fitted).evaluate(
                from_device_lists(g, len(plat), [[[plat.entry]] * len(g)])
            )
            pl, pm, pe = ev.latency_s[0], ev.memory_mb[0].max(), ev.energy_j[0].max()
            print(
                f"{net}: latency {pl * 1e3:.2f} ms vs {lat * 1e3:.2f} ({pl / lat - 1:+.1%}), "
                f"memory {pm:.1f} MB vs {mem:.1f} ({pm / mem - 1:+.1%}), "
                f"energy {pe:.3f} J vs {en:.3f} ({pe / en - 1:+.1%})"
            )


if __name__ == "__main__":
    main()
