"""What a split part pays beyond its share: each Conv and fully connected layer of a zoo network,
alone, whole and as parts.

Times every splittable Conv and fully connected layer of each network (one per distinct layer,
grouped convolutions left out) as calibration step 2 does (``dse.calibrate.channels``): one-node
models with random weights, whole and with whole 16-channel blocks near 1/4, 1/2 and 3/4 of
its output channels, interleaved rounds at one thread. Fits ``t(c) = a + b c`` per layer
(``models_analytical.calibration.fit_part_fixed``) and prints, per network, the fixed share
``f = a / t(whole)`` every part pays (weighted by the layers' whole times, median, p10-p90),
the half part's time against half the whole, and the six costliest layers.

    python scripts/split_parts.py alexnet densenet121 [--runs 5]

Measured 2026-11-24 (33 s for alexnet vgg16 resnet50 densenet121 googlenet), f weighted by
time: AlexNet 0.064, VGG-16 0.030, ResNet-50 0.089, DenseNet-121 0.191 (its first 32-channel 3x3
convolution, at 56x56, 0.29: a half costs 1.29 times its share), GoogLeNet 0.115.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dse.calibrate.channels import measure_part_costs
from dse.net import load_net
from models_analytical.calibration import fit_part_fixed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("nets", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--block", type=int, default=16, help="channels per block of a part")
    a = ap.parse_args()
    for name in a.nets:
        t0 = time.perf_counter()
        rows = measure_part_costs(load_net({"name": name}), a.block, 1, a.runs)
        fit = fit_part_fixed(rows)
        shares, err = fit.per_layer, fit.median_rel_error
        layers = {}
        for r in rows:
            layers.setdefault(r["key"], []).append(r)
        keys = [k for k in layers if k in shares]
        whole = np.array([layers[k][-1]["seconds"] for k in keys])
        f = np.array([shares[k] for k in keys])
        half = []
        for k in keys:
            rs = layers[k]
            mid = min(rs[:-1], key=lambda r: abs(r["channels"] / r["full"] - 0.5))
            half.append(mid["seconds"] / (mid["channels"] / mid["full"] * rs[-1]["seconds"]))
        half = np.array(half)
        p10, p50, p90 = np.percentile(f, [10, 50, 90])
        print(
            f"{name}: {len(keys)} layers timed in {time.perf_counter() - t0:.0f} s, "
            f"{whole.sum() * 1e3:.1f} ms whole; fixed share f {np.average(f, weights=whole):.3f} "
            f"weighted by time, median {p50:.3f}, p10-p90 {p10:.3f}-{p90:.3f}; part / (share x "
            f"whole) near half {np.average(half, weights=whole):.3f}; lines fit to {err:.1%}"
        )
        for i in np.argsort(-whole)[:6]:
            rs = layers[keys[i]]
            print(
                f"  {rs[0]['layer']:44s} {rs[0]['full']:5d} channels  whole "
                f"{whole[i] * 1e3:7.2f} ms  f {f[i]:.3f}  near half {half[i]:.3f}"
            )


if __name__ == "__main__":
    main()
