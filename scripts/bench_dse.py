"""Time the exploration as a user runs it, with the thesis's settings.

    python scripts/bench_dse.py [--nets vgg16 densenet121] [--repeat N] [--against DIR]
        [extra overrides ...]

Runs `python -m dse +net=NET` (population 1000, 100 generations, default platform) in a fresh
process per network, start-up included, and prints `NET: T s wall, E evaluations/s`. With
``--repeat N`` each network runs N times and the median is printed too. ``--against DIR`` (another
checkout, e.g. `git worktree add /tmp/old HEAD~3`) runs that code alternately with this one, so a
shared machine's load falls on both alike; compare the medians. Before each run, one VGG-16
inference in onnxruntime on one thread is timed (median of 3, ``--no-probe`` to skip) and
printed beside it: this machine's speed at that moment (it moves by 20-30 % within minutes on a
shared VM), so a figure can be read against the machine it was measured on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(root: Path, net: str, overrides: list[str]) -> tuple[float, int] | str:
    """Wall seconds and evaluations of one run of the checkout at ``root``, or why it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "dse",
                f"+net={net}",
                "progress=false",
                f"hydra.run.dir={tmp}",
                *overrides,
            ],
            cwd=root,  # `python -m dse` imports the package of the working directory first
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            return f"failed: {lines[-1] if lines else r.returncode}"
        return wall, json.loads((Path(tmp) / "summary.json").read_text())["evaluations"]


def vgg16_inference_ms() -> Callable[[], float]:
    """A function timing one VGG-16 inference (ms, median of 3) on one onnxruntime thread."""
    import numpy as np

    from dse.net import zoo
    from dse.runtime.rank.sessions import session

    sess = session(zoo.materialize("vgg16", 0), "cpu", 1)  # a rank's session settings
    x = {sess.get_inputs()[0].name: np.zeros((1, 3, 224, 224), np.float32)}
    sess.run(None, x)

    def probe() -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            sess.run(None, x)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    return probe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["vgg16", "densenet121"])
    ap.add_argument("--repeat", type=int, default=1, help="runs per network (median printed)")
    ap.add_argument("--against", type=Path, help="another checkout, run alternately")
    ap.add_argument("--no-probe", action="store_true", help="do not time VGG-16 inferences")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. chromosome=naive")
    args = ap.parse_args()
    probe = None if args.no_probe else vgg16_inference_ms()
    roots = {"this": ROOT}
    if args.against:
        roots["against"] = args.against.resolve()
    for net in args.nets:
        walls: dict[str, list[float]] = {k: [] for k in roots}
        for i in range(args.repeat):
            for label, root in roots.items():
                speed = f" (one VGG-16 inference {probe():.0f} ms)" if probe else ""
                result = once(root, net, args.overrides)
                tag = (
                    f"{net}"
                    + (f" [{label}]" if args.against else "")
                    + (f" run {i + 1}" if args.repeat > 1 else "")
                )
                if isinstance(result, str):
                    print(f"{tag}: {result}", flush=True)
                    continue
                wall, evals = result
                walls[label].append(wall)
                print(
                    f"{tag}: {wall:.1f} s wall, {evals / wall:,.0f} evaluations/s{speed}",
                    flush=True,
                )
        if args.repeat > 1 or args.against:
            for label, w in walls.items():
                if w:
                    name = f"{net} [{label}]" if args.against else net
                    print(f"{name}: median {statistics.median(w):.1f} s of {len(w)} runs")


if __name__ == "__main__":
    main()
