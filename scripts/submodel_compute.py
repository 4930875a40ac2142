"""Does the model's per-device compute match the sub-models the runtime runs? No MPI needed.

For random mappings of the given kinds (as ``dse.fidelity`` draws them), the runtime's
partitioner writes each device's sub-models. Each sub-model is timed in this process (one
thread, the runtime's session options; 2 warm-up and ``--runs`` timed rounds, every sub-model
once per round), and each device's sum is printed beside the calibrated model's compute for
that device (``busy``).

    python scripts/submodel_compute.py --net resnet50 [--kinds split mixed] [--mappings 3]
    python scripts/submodel_compute.py --net densenet121 --calibration

Measured 2026-11-24 with run K's calibration, on run K's fidelity mappings (split, mixed and
front; rebuilt with ``dse.fidelity.choose``), per device:

| network | sub-models alone vs the model | MPI-measured compute vs sub-models alone |
|---|---|---|
| ResNet-50 | +5 to +22 %, median +14 % | 0 to +9 %, median +4 % |
| DenseNet-121 | +3 to +43 %, median +28 % | -3 to +5 %, median +1 % |

The first column is what this script prints, there for run K's mappings (on its own random
ones, ResNet-50 split and mixed, 2 each: +8 to +18 %); the second divides run K's
``measurements.json`` per-rank compute by it.

So most of the compute the model misses is in the sub-models themselves, and one process can
measure it: the layers' cost inside a part, and a cost per sub-model run. Two ranks running
side by side under MPI add only a few percent.
"""

from __future__ import annotations

import argparse

import numpy as np
import yaml

from dse.calibrate.__main__ import LABELS, calibration_mappings, cut_devices
from dse.calibrate.store import calibrated_path
from dse.cli import CONF_DIR
from dse.fidelity import random_mappings
from dse.mapping import MappingBatch, derive_owner
from dse.net import load_net
from dse.platform import load_platform
from dse.runtime.partition import partition
from dse.runtime.sequential import time_segments
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel


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
    platform = load_platform(
        yaml.safe_load((CONF_DIR / "platform" / f"{a.platform}.yaml").read_text())
    )
    path = calibrated_path(platform.name)
    if not path.exists():
        raise SystemExit(f"no calibration for {platform.name}: run python -m dse.calibrate first")
    net = load_net({"name": a.net})
    g, n_dev = net.graph, len(platform.devices)
    model = AnalyticalModel(g, platform, load_coefficients(path), threads=1)
    if a.calibration:
        dev_a, dev_b = cut_devices(platform)
        batch = calibration_mappings(g, model.tables.t_work[0], dev_a, dev_b, n_dev)[1:]
        labels = list(LABELS[1:])
    else:
        rng = np.random.default_rng(a.seed)
        share = np.concatenate([random_mappings(g, n_dev, k, a.mappings, rng) for k in a.kinds])
        labels = [f"{k}_{i}" for k in a.kinds for i in range(a.mappings)]
        batch = MappingBatch(share, derive_owner(g, share))
    busy = model.evaluate(batch).busy_s * 1e3
    print(f"{a.net} on {platform.name} (calibrated {path}); per device: model / sub-models alone")
    totals = [0.0, 0.0]
    for p, label in enumerate(labels):
        timed = time_segments(partition(net, batch[p], platform), a.runs, warmup=2)
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
