"""What cutting a network into sub-models costs: each vertical cut's segments, timed alone.

For one-cut vertical mappings of a network (device 0 runs the layers before the cut, device 1 the
rest), the runtime's partitioner writes its sub-models; each is run alone in this process (one
thread, the runtime's session options) alternately with the whole model, and the medians are
printed beside the calibrated model's layer times for the same layers. (Before sends waited for
their deadline, a cut inside a DenseNet dense block left device 0 one segment per layer of the
block before the cut, each layer's output being sent as soon as it was made.)

    python scripts/segment_overhead.py --net densenet121 [--platform localhost] [--runs 9]
"""

from __future__ import annotations

import argparse

import numpy as np

from dse.calibrate.diagnostics import calibrated_model
from dse.mapping import whole as whole_on
from dse.net import zoo
from dse.runtime.partition import partition
from dse.runtime.sequential import time_segments_beside
from dse.runtime.sessions import session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="densenet121")
    ap.add_argument("--platform", default="localhost")
    ap.add_argument("--runs", type=int, default=9, help="timed runs of each model per cut")
    ap.add_argument("--cuts", type=float, nargs="+", default=[0.2, 0.35, 0.5, 0.65, 0.8])
    a = ap.parse_args()
    net, model, path = calibrated_model(a.net, a.platform)
    platform = model.platform
    g, n = net.graph, len(net.graph)
    layer_ms = (model.tables.t_work[0] + model.tables.t_fixed[0]) * 1e3
    whole = session(zoo.materialize(a.net, 0), "cpu", 1)
    print(f"{a.net}: model {layer_ms.sum():.1f} ms for the whole network (calibrated {path})")
    for frac in a.cuts:
        cut = min(max(int(n * frac), 1), n - 1)
        devices = np.where(np.arange(n) < cut, 0, 1)
        dep = partition(net, whole_on(g, len(platform), devices), platform)
        # alternately with the whole network, so a slow spell hits both
        timed, whole_s = time_segments_beside(dep, whole, a.runs, warmup=1)
        w = whole_s * 1e3
        per_rank = [sum(s for dev, s in timed.values() if dev == d) * 1e3 for d in (0, 1)]
        counts = [sum(1 for dev, _ in timed.values() if dev == d) for d in (0, 1)]
        model_ms = (layer_ms[:cut].sum(), layer_ms[cut:].sum())
        print(
            f"cut after layer {cut}/{n}: whole {w:.1f} ms; device 0 {counts[0]} segments "
            f"{per_rank[0]:.1f} ms (model {model_ms[0]:.1f}), device 1 {counts[1]} segments "
            f"{per_rank[1]:.1f} ms (model {model_ms[1]:.1f}); segments / whole "
            f"{sum(per_rank) / w:.3f}"
        )


if __name__ == "__main__":
    main()
