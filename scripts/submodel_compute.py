"""Does the model's per-device compute match the sub-models the runtime runs? No MPI needed.

For random mappings of the given kinds (as ``dse.fidelity`` draws them), the runtime's
partitioner writes each device's sub-models. Each sub-model is timed in this process (one
thread, the runtime's session options; 2 warm-up and ``--runs`` timed rounds, every sub-model
once per round), and each device's sum is printed beside the calibrated model's compute for
that device (``busy``).

    python scripts/submodel_compute.py --net resnet50 [--kinds split mixed] [--mappings 3]
    python scripts/submodel_compute.py --net densenet121 --calibration

Since run L, ``dse.calibrate`` fits what a sub-model costs beyond its layers on exactly this
kind of timing (``dse/calibrate/submodels.py``: calibration's own cut mappings), and the model
charges it. Measured 2026-11-24 (``--net resnet50``, then ``--net densenet121``, 9 s each, run
L's calibration, this script's random split and mixed mappings):

| network | sub-models alone vs the model, per device | all devices |
|---|---|---|
| ResNet-50 | -2.6 to +1.4 % | 0.996 |
| DenseNet-121 | split -2.9 to +2.7 %, mixed -7.7 to -3.4 % | 0.968-0.974 (two runs) |

With run K's calibration (no sub-model costs), run K's split, mixed and front mappings took
+5 to +22 % (ResNet-50, median +14 %) and +3 to +43 % (DenseNet-121, median +28 %) more alone
than the model's compute, and their ranks under MPI 0 to +9 % and -3 to +5 % more again: the
compute the model missed was in the sub-models themselves, not in two ranks running side by
side.
"""

from __future__ import annotations

import argparse

import numpy as np

from dse.calibrate.deployments import LABELS, calibration_mappings, cut_devices
from dse.calibrate.diagnostics import calibrated_model
from dse.mapping import Mappings, random_mappings
from dse.runtime.partition import partition
from dse.runtime.sequential import time_segments


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet50")
    ap.add_argument("--platform", default="localhost")
    ap.add_argument("--kinds", nargs="+", default=["split", "mixed"])
    ap.add_argument("--mappings", type=int, default=3, help="random mappings per kind")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--calibration",
        action="store_true",
        help="dse.calibrate's own cut mappings (vertical, split, mixed) instead of random ones",
    )
    a = ap.parse_args()
    net, model, path = calibrated_model(a.net, a.platform)
    platform = model.platform
    g, n_dev = net.graph, len(platform.devices)
    if a.calibration:
        dev_a, dev_b = cut_devices(platform)
        batch = calibration_mappings(g, model.tables.t_work[0], dev_a, dev_b, n_dev).take(
            slice(1, None)
        )
        labels = list(LABELS[1:])
    else:
        rng = np.random.default_rng(a.seed)
        batch = Mappings.concat([random_mappings(g, n_dev, k, a.mappings, rng) for k in a.kinds])
        labels = [f"{k}_{i}" for k in a.kinds for i in range(a.mappings)]
    busy = model.evaluate(batch).busy_s * 1e3
    print(f"{a.net} on {platform.name} (calibrated {path}); per device: model / sub-models alone")
    totals = [0.0, 0.0]
    for p, label in enumerate(labels):
        timed = time_segments(partition(net, batch.take(p), platform), a.runs, warmup=2)
        cells = []
        for d in range(n_dev):
            alone = sum(s for dev, s in timed.values() if dev == d) * 1e3
            count = sum(1 for dev, _ in timed.values() if dev == d)
            if count:
                cells.append(
                    f"device {d}: {busy[p, d]:6.1f} / {alone:6.1f} ms "
                    f"({(alone / busy[p, d] - 1) * 100:+5.1f} %, {count} sub-models)"
                )
                totals[0] += busy[p, d]
                totals[1] += alone
        print(f"  {label:10s} " + " | ".join(cells))
    print(f"all devices: sub-models alone / model = {totals[1] / totals[0]:.3f}")


if __name__ == "__main__":
    main()
