"""Robust plans measured on an emulated cluster: the worst latency over network profiles of the
plan searched for the nominal network against the plan searched for the worst case.

Two searches of the same budget (``python -m dse``, objectives latency and memory), one plain,
one with ``robust=worst`` over profiles of one board's port (default ``edge1`` at 1000, 200
and 50 Mbit/s: ``--rates``), each with the platform's ``profiles:`` given on the command line;
each search's best-latency mapping deployed. Then, for each profile, the cluster's port is set
to it (``python -m dse.cluster set``) and both deployments are measured (``--rounds``
interleaved rounds of ``--iterations`` inferences each, medians). Printed: each plan's
predicted and measured latency under each profile, and each plan's worst.

Target (issue 76): the robust plan's worst measured latency at least 20 % below the nominal
plan's worst, where the profiles differ enough for it to matter.

    python -m dse.cluster up platform=edge3_ethernet
    python scripts/robust_cluster.py --net vgg16
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dse.cluster import launcher_for
from dse.runtime.launch.mpiexec import launch
from dse.serve.deployment import platform_file


def dse(*words: str) -> str:
    """A dse command, as a user types it; its output shown only when it fails."""
    r = subprocess.run([sys.executable, "-m", *words], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(words)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--net", default="vgg16")
    p.add_argument("--platform", default="edge3_ethernet")
    p.add_argument("--board", default="edge1")
    p.add_argument("--rates", type=float, nargs="+", default=[1000.0, 200.0, 50.0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--search", nargs="*", default=["algorithm.pop_size=100", "algorithm.n_gen=60"])
    args = p.parse_args()
    cfg = platform_file(args.platform)
    nominal_rate = float(
        cfg["emulation"]["boards"][args.board].get("rate_mbit") or cfg["emulation"]["rate_mbit"]
    )
    names = {r: f"port{r:g}" for r in args.rates if r != nominal_rate}
    profiles = ",".join(f"{n}:{{ports:{{{args.board}:{{rate_mbit:{r:g}}}}}}}" for r, n in
                        names.items())  # fmt: skip
    common = [f"+net={args.net}", f"platform={args.platform}", "objectives=[latency,memory]",
              f"+platform.profiles={{{profiles}}}", *args.search]  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="robust-cluster-"))
    plans = {}
    for label, extra in (("nominal", []), ("robust", ["robust=worst"])):
        run, out = root / f"search-{label}", root / f"deploy-{label}"
        dse("dse", *common, *extra, f"hydra.run.dir={run}")
        best = run / "best_latency"
        files = [f"mapping={best / 'mapping.json'}", f"horizontal={best / 'horizontal.json'}"]
        dse("dse.deploy", f"+net={args.net}", f"platform={args.platform}", f"out={out}", *files)
        plans[label] = out
        plan = json.loads((out / "plan.json").read_text())
        print(f"{label}: best-latency mapping {plan['mapping_hash']} on "
              f"{', '.join(r['device'] for r in plan['ranks'])}")  # fmt: skip
    launcher = launcher_for(cfg)
    measured: dict[str, dict[float, float]] = {k: {} for k in plans}
    try:
        for rate in args.rates:
            dse("dse.cluster", "set", f"platform={args.platform}", f"board={args.board}",
                f"rate_mbit={rate:g}")  # fmt: skip
            rounds: dict[str, list[float]] = {k: [] for k in plans}
            for _ in range(args.rounds):  # nominal, robust, nominal, robust...
                for label, out in plans.items():
                    m = launch(out, warmup=2, iterations=args.iterations, launcher=launcher)
                    if m.status != "ok" or m.latency_ms is None:
                        sys.exit(f"{label} at {rate:g} Mbit/s: {m.reason}")
                    rounds[label].append(m.latency_ms.median)
            for label in plans:
                measured[label][rate] = statistics.median(rounds[label])
                spread = f"{min(rounds[label]):.1f}-{max(rounds[label]):.1f}"
                print(f"  {args.board} at {rate:g} Mbit/s: {label:<8} "
                      f"{measured[label][rate]:8.1f} ms ({spread})")  # fmt: skip
    finally:
        dse("dse.cluster", "set", f"platform={args.platform}", f"board={args.board}",
            f"rate_mbit={nominal_rate:g}")  # fmt: skip
    worst = {k: max(v.values()) for k, v in measured.items()}
    gain = 1 - worst["robust"] / worst["nominal"]
    print(f"worst measured latency: nominal plan {worst['nominal']:.1f} ms, robust plan "
          f"{worst['robust']:.1f} ms: {gain * 100:.1f} % below (target 20 %: "
          f"{'met' if gain >= 0.2 else 'NOT met'})")  # fmt: skip
    print(f"(work folder {root}: remove it when done)")


if __name__ == "__main__":
    main()
