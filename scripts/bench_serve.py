"""Serving's figures: what the service adds to a request, and what frames in flight give.

1. ``overhead`` (``platform=localhost``): for each network, the search's best-latency mapping
   deployed, then in interleaved rounds the deployment's own measured run (what ``run.sh``
   runs: latency from a common barrier to the last rank's end, median of its iterations)
   against the same deployment served (``Deployment.run``, one frame at a time, timed by
   the caller from sending the input to holding the outputs, median). Target: the service
   adds at most 5 % + 0.5 ms.
2. ``pipeline`` (an emulated cluster, default ``edge3_ethernet``, up): the search's
   best-period vertical mapping (``chromosome=vertical objectives=[period,latency]``) over
   the platform's devices, deployed and measured by ``dse.deploy measure=true stream=N``
   (the model's predicted period beside the runtime's measured one), then served: frames
   one at a time, and streamed with ``in_flight`` frames; the throughputs beside 1 / the
   predicted period. Target: streamed within 10 % of 1 / predicted period, and clearly above
   one frame at a time.

Run it on a quiet machine, with the platforms calibrated (``python -m dse.calibrate``): the
predicted period is the calibrated model's.

    python scripts/bench_serve.py overhead --nets vgg16 mobilenetv2
    python scripts/bench_serve.py pipeline --net vgg16
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dse.runtime.deployment.plan import input_arrays
from dse.runtime.deployment.reader import read_plan
from dse.runtime.launch.mpiexec import launch
from dse.serve import Deployment


def dse(*words: str) -> None:
    """A dse command, as a user types it; its output shown only when it fails."""
    r = subprocess.run([sys.executable, "-m", *words], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(words)} failed:\n{r.stdout}\n{r.stderr}")


def found(net: str, platform: str, root: Path, best: str, *search: str) -> Path:
    """The search's ``best`` mapping of ``net`` on ``platform`` deployed under ``root``."""
    run, out = root / f"search-{net}", root / f"deploy-{net}"
    dse("dse", f"+net={net}", f"platform={platform}", f"hydra.run.dir={run}", *search)
    dse("dse.deploy", f"+net={net}", f"platform={platform}", f"out={out}",
        f"mapping={run / best / 'mapping.json'}",
        f"horizontal={run / best / 'horizontal.json'}")  # fmt: skip
    return out


def served_ms(directory: Path, platform: str, frames: int, warmup: int) -> list[float]:
    """Each frame's time through the served deployment (ms), one frame at a time."""
    x = input_arrays(read_plan(directory))
    times = []
    with Deployment.start(directory, platform=platform) as d:
        for i in range(warmup + frames):
            t = time.perf_counter()
            d.run(x)
            if i >= warmup:
                times.append((time.perf_counter() - t) * 1e3)
    return times


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.3f} ms (min {min(values):.3f}, max {max(values):.3f})"
    )


def overhead(args: argparse.Namespace, root: Path) -> None:
    for net in args.nets:
        out = found(net, "localhost", root, "best_latency", "algorithm.pop_size=50",
                    "algorithm.n_gen=10")  # fmt: skip
        own, service = [], []
        for _ in range(args.rounds):  # A, B, A, B...: a slow spell hits both
            m = launch(out, warmup=args.warmup, iterations=args.frames)
            assert m.status == "ok", m.reason
            own.append(float(np.median(m.latency_ms.all)))
            service.append(statistics.median(served_ms(out, "localhost", args.frames, args.warmup)))
        a, b = statistics.median(own), statistics.median(service)
        allowed = 0.05 * a + 0.5
        print(f"{net} on localhost ({len(read_plan(out).ranks)} ranks), {args.rounds} rounds "
              f"of {args.frames} frames:")  # fmt: skip
        print(f"  run.sh latency   {spread(own)}")
        print(f"  served, per call {spread(service)}")
        print(f"  the service adds {b - a:+.3f} ms ({(b / a - 1) * 100:+.2f} %); "
              f"target at most {allowed:.3f} ms (5 % + 0.5 ms): "
              f"{'met' if b - a <= allowed else 'NOT met'}")  # fmt: skip


def pipeline(args: argparse.Namespace, root: Path) -> None:
    search = ["chromosome=vertical", "objectives=[period,latency]", "algorithm.pop_size=50"]
    out = found(args.net, args.platform, root, "best_period", *search, "algorithm.n_gen=20")
    best = root / f"search-{args.net}" / "best_period"
    measure = ["measure=true", f"stream={args.stream}", "warmup=2", f"iterations={args.frames}"]
    dse("dse.deploy", f"+net={args.net}", f"platform={args.platform}", f"out={out}",
        f"mapping={best / 'mapping.json'}", *measure)  # fmt: skip
    cmp = json.loads((out / "comparison.json").read_text())
    predicted = cmp["predicted"]["objectives"]["period_ms"]
    measured = cmp["stream"]["period_ms"]
    plan = read_plan(out)
    x = input_arrays(plan)
    print(f"{args.net} on {args.platform}: best-period vertical mapping over "
          f"{len(plan.ranks)} ranks ({', '.join(r.device for r in plan.ranks)})")  # fmt: skip
    print(f"  predicted: latency {cmp['predicted']['latency_ms']:.1f} ms, period "
          f"{predicted:.1f} ms = {1e3 / predicted:.2f} frames/s")  # fmt: skip
    print(f"  run.sh: latency {cmp['latency_ms']['median']:.1f} ms, streamed period "
          f"{measured:.1f} ms = {1e3 / measured:.2f} frames/s")  # fmt: skip
    with Deployment.start(out, platform=args.platform, in_flight=max(args.in_flight)) as d:
        for _ in range(2):
            d.run(x)
        rates: dict[str, list[float]] = {"one at a time": []}
        front_cpu: list[float] = []
        rates.update({f"in_flight={n}": [] for n in args.in_flight})
        for _ in range(args.rounds):
            t = time.perf_counter()
            for _ in range(args.frames):
                d.run(x)
            rates["one at a time"].append(args.frames / (time.perf_counter() - t))
            for n in args.in_flight:
                t, cpu = time.perf_counter(), time.process_time()
                for _ in d.stream((x for _ in range(args.frames)), in_flight=n):
                    pass
                rates[f"in_flight={n}"].append(args.frames / (time.perf_counter() - t))
                front_cpu.append((time.process_time() - cpu) / args.frames * 1e3)
    cpu_ms = statistics.median(front_cpu)
    print(f"  the application's side: {cpu_ms:.2f} ms of CPU per frame streamed (this process;"
          " on one machine with the boards, taken from their cores)")  # fmt: skip
    for label, r in rates.items():
        m = statistics.median(r)
        print(f"  served, {label:>13}: median {m:.2f} frames/s (min {min(r):.2f}, max "
              f"{max(r):.2f}); x {m * predicted / 1e3:.3f} of 1 / predicted period")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--nets", nargs="+", default=["vgg16", "mobilenetv2"])
    o.add_argument("--rounds", type=int, default=5)
    o.add_argument("--frames", type=int, default=20)
    o.add_argument("--warmup", type=int, default=3)
    p = sub.add_parser("pipeline")
    p.add_argument("--net", default="vgg16")
    p.add_argument("--platform", default="edge3_ethernet")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--frames", type=int, default=20)
    p.add_argument("--stream", type=int, default=20)
    p.add_argument("--in-flight", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        (overhead if args.what == "overhead" else pipeline)(args, Path(tmp))


if __name__ == "__main__":
    main()
