"""Benchmark the phase-two runtime on localhost and print the figures (run on a quiet machine).

1. A one-device mapping through ``dse.runtime`` (mpiexec, 1 rank) against plain onnxruntime on
   the whole model at the same thread count: medians, runs interleaved (target: within 5 %).
2. A 2-device LOP mapping (every splittable layer over both cores) against the one-device
   mapping at 1 thread (target: at least 1.6x faster, aim 1.75x).
3. Deploy (partition + write) time of a 2-device LOP mapping (targets: VGG-16 < 2 s,
   DenseNet-121 < 5 s), weights already materialized: the second of two deploys (the first
   also runs the whole model once for the equivalence check's outputs, then cached).

    python scripts/bench_runtime.py                 # VGG-16, 3 interleaved rounds of 4 + 20
    python scripts/bench_runtime.py --net alexnet --rounds 1 --iterations 3   # a quick check
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from dse.mapping import from_device_lists
from dse.net import load_net
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.runtime.compile.partition import partition
from dse.runtime.deployment.plan import input_arrays
from dse.runtime.launch.deploy import deploy  # noqa: E402
from dse.runtime.launch.mpiexec import launch
from dse.runtime.rank.sessions import session


def lop(net, n_devices: int = 2):
    g = net.graph
    lists = [[list(range(n_devices)) if g.splittable[i] else [0] for i in range(len(g))]]
    return from_device_lists(g, n_devices, lists)


def one_device(net, n_devices: int = 2):
    return from_device_lists(net.graph, n_devices, [[[0]] * len(net.graph)])


def plain_median(sess, feeds, warmup: int, iterations: int) -> float:
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def runtime_median(directory: Path, warmup: int, iterations: int) -> float:
    r = launch(directory, timeout_s=1800, warmup=warmup, iterations=iterations)
    if not r.ok:
        raise SystemExit(f"runtime run failed: {r.reason}")
    return float(r.latency.median)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", default="vgg16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--deploy-nets", default="vgg16,densenet121")
    args = parser.parse_args()
    platform = load_platform(yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text()))
    threads = platform.devices[0].threads
    net = load_net({"name": args.net})
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp:
        one_dir, lop_dir = Path(tmp) / "one", Path(tmp) / "lop"
        deploy(net, platform, one_device(net), one_dir)
        deploy(net, platform, lop(net), lop_dir)
        plan = partition(net, one_device(net), platform).plan
        sess = session(net.weighted_model(), "cpu", threads)
        feeds = input_arrays(plan)
        plain, one, two = [], [], []
        for r in range(args.rounds):  # interleaved: drifts of the machine hit all three
            plain.append(plain_median(sess, feeds, args.warmup, args.iterations))
            one.append(runtime_median(one_dir, args.warmup, args.iterations))
            two.append(runtime_median(lop_dir, args.warmup, args.iterations))
            print(
                f"round {r + 1}: plain onnxruntime {plain[-1]:.2f} ms, dse.runtime 1 device "
                f"{one[-1]:.2f} ms, 2-device LOP {two[-1]:.2f} ms",
                flush=True,
            )
        p, o, t = (float(np.median(x)) for x in (plain, one, two))
        print(f"\n{args.net}, {threads} thread(s), medians of {args.rounds} interleaved rounds")
        print(
            f"  one device through dse.runtime: {o:.2f} ms vs plain onnxruntime {p:.2f} ms "
            f"({(o / p - 1) * 100:+.1f} %; target within 5 %)"
        )
        print(f"  2-device LOP: {t:.2f} ms, {o / t:.2f}x the one-device run (target >= 1.6x)")
    print("\ndeploy (partition + write sub-models) of a 2-device LOP mapping:")
    for name in args.deploy_nets.split(","):
        n = load_net({"name": name})
        n.weighted_model()  # materialize the seeded weights once, outside the timing
        times = []
        with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
            for k in range(2):  # the first also runs the whole model for its outputs (cached)
                t0 = time.perf_counter()
                deploy(n, platform, lop(n), Path(tmp) / f"d{k}")
                times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        n.weighted_model()
        load = time.perf_counter() - t0
        print(
            f"  {name}: {times[1]:.2f} s (of which loading the weighted model {load:.2f} s); "
            f"the first, with the whole model's outputs computed for the check, {times[0]:.2f} s"
        )


if __name__ == "__main__":
    main()
