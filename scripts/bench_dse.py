"""Time the exploration as a user runs it, with the thesis's settings.

    python scripts/bench_dse.py [--nets vgg16 densenet121] [extra overrides ...]

Runs `python -m dse +net=NET` (population 1000, 100 generations, default platform) in a fresh
process per network, start-up included, and prints `NET: T s wall, E evaluations/s`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["vgg16", "densenet121"])
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. chromosome=naive")
    args = ap.parse_args()
    for net in args.nets:
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
                    *args.overrides,
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - t0
            if r.returncode != 0:
                print(f"{net}: failed: {r.stderr.strip().splitlines()[-1]}")
                continue
            evals = json.loads((Path(tmp) / "summary.json").read_text())["evaluations"]
        print(f"{net}: {wall:.1f} s wall, {evals / wall:,.0f} evaluations/s")


if __name__ == "__main__":
    main()
