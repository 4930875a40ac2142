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
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from dse.calibrate.store import calibrated_path
from dse.cli import CONF_DIR
from dse.mapping import MappingBatch, derive_owner
from dse.net import load_net, zoo
from dse.platform import load_platform
from dse.runtime.partition import partition
from dse.runtime.sessions import session
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel


def feeds(sess) -> dict[str, np.ndarray]:  # noqa: ANN001 - an onnxruntime InferenceSession
    rng = np.random.default_rng(0)
    return {
        i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.float32)
        for i in sess.get_inputs()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="densenet121")
    ap.add_argument("--platform", default="localhost")
    ap.add_argument("--runs", type=int, default=9, help="timed runs of each model per cut")
    ap.add_argument("--cuts", type=float, nargs="+", default=[0.2, 0.35, 0.5, 0.65, 0.8])
    a = ap.parse_args()
    platform = load_platform(
        yaml.safe_load((CONF_DIR / "platform" / f"{a.platform}.yaml").read_text())
    )
    path = calibrated_path(platform.name)
    if not path.exists():
        raise SystemExit(f"no calibration for {platform.name}: run python -m dse.calibrate first")
    net = load_net({"name": a.net})
    g, n = net.graph, len(net.graph)
    model = AnalyticalModel(g, platform, load_coefficients(path), threads=1)
    layer_ms = (model.tables.t_work[0] + model.tables.t_fixed[0]) * 1e3
    whole = session(zoo.materialize(a.net, 0), "cpu", 1)
    whole_in = feeds(whole)
    print(f"{a.net}: model {layer_ms.sum():.1f} ms for the whole network (calibrated {path})")
    for frac in a.cuts:
        cut = min(max(int(n * frac), 1), n - 1)
        share = np.zeros((1, n, len(platform)))
        share[0, :cut, 0] = share[0, cut:, 1] = 1.0
        dep = partition(net, MappingBatch(share, derive_owner(g, share)), platform)
        ranks = {
            s["segment"]: r["rank"] for r in dep.plan["ranks"] for s in r["steps"] if "segment" in s
        }
        with tempfile.TemporaryDirectory(prefix="segments-") as tmp:
            dep.write_segments(Path(tmp))
            sess = {name: session(Path(tmp) / name, "cpu", 1) for name in dep.segments}
            ins = {name: feeds(s) for name, s in sess.items()}
            for name, s in sess.items():
                s.run(None, ins[name])
            times: dict[str, list[float]] = {name: [] for name in sess}
            whole_t = []
            for _ in range(a.runs):  # alternately, so a slow spell hits both
                t0 = time.perf_counter()
                whole.run(None, whole_in)
                whole_t.append(time.perf_counter() - t0)
                for name, s in sess.items():
                    t0 = time.perf_counter()
                    s.run(None, ins[name])
                    times[name].append(time.perf_counter() - t0)
        med = {name: float(np.median(v)) * 1e3 for name, v in times.items()}
        w = float(np.median(whole_t)) * 1e3
        per_rank = [sum(v for k, v in med.items() if ranks[k] == r) for r in (0, 1)]
        counts = [sum(1 for k in med if ranks[k] == r) for r in (0, 1)]
        model_ms = (layer_ms[:cut].sum(), layer_ms[cut:].sum())
        print(
            f"cut after layer {cut}/{n}: whole {w:.1f} ms; device 0 {counts[0]} segments "
            f"{per_rank[0]:.1f} ms (model {model_ms[0]:.1f}), device 1 {counts[1]} segments "
            f"{per_rank[1]:.1f} ms (model {model_ms[1]:.1f}); segments / whole "
            f"{sum(per_rank) / w:.3f}"
        )


if __name__ == "__main__":
    main()
