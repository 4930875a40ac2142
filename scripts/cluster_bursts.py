"""How fast a CPU-share device computes a burst of work after waiting, per mechanism.

    python scripts/cluster_bursts.py [--cpu 1] [--gap-ms 30] [--repeats 5] [--rounds 3]
        (as root)

A rank on a device waits for its inputs, then computes for a few milliseconds, then waits
again. A slower processor computes every such burst at its speed. Two devices of shares 0.6
and 0.4 share one CPU (as edge1 of conf/platform/edge3_*.yaml), built by dse.cluster.cpu under
each ``cpu_share``: ``corunner`` (co-runner processes running, as the launcher starts them while
something runs on a board) and ``quota`` (a CFS quota of the share per 10 ms period). A worker
in one device's cgroup (the other idle) sleeps ``--gap-ms``, then computes a burst of a given
CPU time (single-threaded float32 matrix products), and again, for bursts of 0.25 to 64 ms.
``paced`` is ``corunner`` with the worker paced as a rank on the device is
(:mod:`dse.runtime.rank.pace`: after each burst it yields its CPU until the burst has lasted its CPU
time over the device's speed). ``weight`` (the cluster's default) has no co-runners: the
devices' cgroups divide the CPU by their CPU weights (their shares) when both compute, and the
worker is paced. The worker runs under the scheduling policy the launcher gives ranks
(``SCHED_BATCH`` under co-runners and weights). Per mechanism, device and burst: the median speed
(the burst's CPU time over its wall time, pacing included) against the device's share, and
its p10-p90. Mechanisms run interleaved in rounds. Needs root
and cgroup v1 (cpu, cpuset, memory); its cgroups are ``dse.bench-bursts-<pid>-<mechanism>``,
removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from cluster_cpu import SHARES, clusters_per_mechanism  # the same two devices

from dse.cluster import cpu
from dse.cluster.cpu import RANK_POLICY
from dse.cluster.names import Names
from dse.cluster.spec import ClusterSpec
from dse.runtime.rank.pace import PACE_ENV, pace_from_env

BURSTS_MS = (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)
MECHANISMS = ("corunner", "paced", "quota", "weight")
#: The cluster's cpu_share per mechanism.
CPU_SHARE = {"corunner": "corunner", "paced": "corunner", "quota": "quota", "weight": "weight"}
#: The mechanisms whose worker is paced as a rank on the device is.
PACED = ("paced", "weight")
N = 64
PERIOD_US = 10_000  # the quotas' (the cluster's default)


def worker(cluster: str, device: str, gap_ms: float, repeats: int) -> None:
    """In the device's cgroups: bursts after gaps; prints {burst_ms: [speed, ...]} as JSON."""
    cpu.join(os.getpid(), Names(cluster), "board", device)
    pace = pace_from_env()  # set by run() for the paced mechanism, as the rank script sets it
    a = np.random.default_rng(0).standard_normal((N, N), dtype=np.float32)
    speeds: dict[str, list[float]] = {str(b): [] for b in BURSTS_MS}
    for _ in range(repeats):
        for burst in BURSTS_MS:
            time.sleep(gap_ms / 1e3)
            t, c = time.perf_counter(), time.process_time()
            while time.process_time() - c < burst / 1e3:
                a @ a
            used = time.process_time() - c
            if pace is not None:
                pace.until(t, c)
            speeds[str(burst)].append(used / (time.perf_counter() - t))
    json.dump(speeds, sys.stdout)


def run(
    cluster: str, spec: ClusterSpec, device: str, paced: bool, args: argparse.Namespace
) -> dict:
    names = Names(cluster)
    corunners = cpu.start_corunners(spec, names, "board")  # none under quotas
    try:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        env.pop(PACE_ENV, None)
        speed = cpu.pace_speed(spec, device)
        if paced and speed is not None:
            env[PACE_ENV] = f"{speed:g}"
        policy = RANK_POLICY[spec.cpu_share]
        chrt = ["chrt", policy, "0"] if policy else []
        out = subprocess.run(
            [*chrt, sys.executable, __file__, "--worker", cluster, device, str(args.gap_ms),
             str(args.repeats)],
            capture_output=True, text=True, env=env, check=True,
        ).stdout  # fmt: skip
    finally:
        for p in corunners:
            p.kill()
            p.wait()
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=int, default=1, help="the CPU both devices share")
    ap.add_argument("--gap-ms", type=float, default=30.0, help="the wait before each burst")
    ap.add_argument("--repeats", type=int, default=5, help="bursts of each length per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        cluster, device, gap, repeats = args.worker
        worker(cluster, device, float(gap), int(repeats))
        return
    shares = tuple(dict.fromkeys(CPU_SHARE.values()))
    clusters, specs = clusters_per_mechanism("bursts", args.cpu, PERIOD_US, shares)
    speeds: dict[tuple[str, str, str], list[float]] = {}
    try:
        for m in shares:
            cpu.build(specs[m], Names(clusters[m]))
        for r in range(args.rounds):
            for m in MECHANISMS if r % 2 == 0 else MECHANISMS[::-1]:
                for device in SHARES:
                    c = CPU_SHARE[m]
                    got = run(clusters[c], specs[c], device, m in PACED, args)
                    for burst, values in got.items():
                        speeds.setdefault((m, device, burst), []).extend(values)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for m in shares:
            cpu.teardown(Names(clusters[m]))
    n = args.rounds * args.repeats
    print(f"speed of a burst after {args.gap_ms:g} ms of waiting (its CPU time over its wall "
          f"time), median and p10-p90 of {n} bursts; CPU {args.cpu}")  # fmt: skip
    header = "mechanism  device  share  " + "  ".join(f"{b:>14g} ms" for b in BURSTS_MS)
    print(header)
    for m in MECHANISMS:
        for device, share in SHARES.items():
            cells = []
            for b in BURSTS_MS:
                v = sorted(speeds[m, device, str(b)])
                p10, p90 = v[int(0.1 * (len(v) - 1))], v[int(round(0.9 * (len(v) - 1)))]
                cells.append(f"{statistics.median(v):.2f} ({p10:.2f}-{p90:.2f})")
            print(f"{m:<9}  {device:<6}  {share:<5g}  " + "  ".join(f"{c:>17}" for c in cells))


if __name__ == "__main__":
    main()
