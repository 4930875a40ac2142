"""How steady a CFS quota makes a device's speed, per CFS period: prints medians and spreads.

    sudo python scripts/cluster_cpu.py [--cpu 1] [--inference-ms 35] [--inferences 20] [--rounds 3]

Two devices of shares 0.6 and 0.4 share one CPU (as edge1 of conf/platform/edge3_*.yaml), each
a cgroup with a CFS quota of its share, built by dse.cluster.cpu. Each device runs a fixed
"inference" (single-threaded float32 matrix products taking --inference-ms on a whole CPU, as
ResNet-50 takes ~35 ms in onnxruntime here) back to back, both devices at once; per period, the
median inference time against the expected one (its CPU time / share) and the spread (p10 to
p90 of the inference times, over the median). Periods run interleaved in rounds, so a change
in the machine's load spreads over all of them. A whole CPU without a quota is the reference.
Two tables: the wall time of an inference (what a run sees, the machine's other load
included), and its CPU time plus the time its cgroup spent throttled (cpu.stat), what the quota
alone makes of it: on a shared machine the second is the one to compare periods by.

The shortest period pauses an inference for the shortest time, but the kernel charges a quota
per tick (4 ms at HZ=250) and per 5 ms slice of runtime, so quotas of a few ms overrun and the
device runs slower than its share. Needs root and cgroup v1 (cpu, cpuset). Its cgroups are
``dse.bench-cpu-<pid>`` and are removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dse.cluster import cpu, system
from dse.cluster.names import Names
from dse.cluster.spec import Board, ClusterSpec, DeviceShare

PERIODS_US = (2_500, 5_000, 10_000, 20_000, 50_000, 100_000)
SHARES = {"dev60": 0.6, "dev40": 0.4}
N = 128


def throttled_s(stat: Path) -> float:
    """Seconds the cgroup has spent throttled (its quota spent) since it was made."""
    fields = dict(line.split() for line in stat.read_text().splitlines())
    return int(fields["throttled_time"]) / 1e9


def kernel(iterations: int, stat: Path) -> tuple[float, float, float]:
    """(wall, CPU, throttled) seconds of one inference."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((N, N), dtype=np.float32) for _ in range(2))
    t, c, q = time.perf_counter(), time.thread_time(), throttled_s(stat)
    for _ in range(iterations):
        a @ b
    return time.perf_counter() - t, time.thread_time() - c, throttled_s(stat) - q


def worker(cluster: str, group: str, iterations: int, count: int) -> None:
    """Join ``group`` (board/device) and print the times of ``count`` inferences."""
    names = Names(cluster)
    cpu.join(os.getpid(), names, *group.split("/"))
    stat = names.cgroup("cpu", *group.split("/")) / "cpu.stat"
    kernel(iterations, stat)  # warm
    print(json.dumps([kernel(iterations, stat) for _ in range(count)]))


def spec_for(cluster: str, cpu_id: int, period_us: int) -> ClusterSpec:
    devices = tuple(DeviceShare(n, "board", s, 1024.0) for n, s in SHARES.items())
    return ClusterSpec(cluster, "bench", "switched", 1000.0, (Board("board", (cpu_id,), 1000.0),),
                       devices, period_us)  # fmt: skip


def run_workers(cluster: str, groups: list[str], iterations: int, count: int) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    procs = {
        g: subprocess.Popen(
            [sys.executable, __file__, "--worker", cluster, g, str(iterations), str(count)],
            stdout=subprocess.PIPE,
            env=env,
        )
        for g in groups
    }
    return {g: json.loads(p.communicate()[0]) for g, p in procs.items()}


def calibrate(cluster: str, ms: float) -> int:
    """Iterations of the kernel taking ``ms`` of CPU time."""
    iterations = 16
    while True:
        t = statistics.median(
            w for w, _, _ in run_workers(cluster, ["board"], iterations, 5)["board"]
        )
        if t > ms / 1e3 / 2:
            return max(1, round(iterations * ms / 1e3 / t))
        iterations *= 2


def spread(xs: list[float]) -> float:
    q = statistics.quantiles(xs, n=10)
    return (q[-1] - q[0]) / statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, default=1, help="the CPU the devices share")
    ap.add_argument("--inference-ms", type=float, default=35.0)
    ap.add_argument("--inferences", type=int, default=20, help="per device, period and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    system.require()
    if os.getloadavg()[0] > 0.5:
        print(f"warning: load average {os.getloadavg()[0]:.1f}: other processes take CPU time "
              "from the devices, the wall times say more about them than about the periods",
              file=sys.stderr)  # fmt: skip
    cluster = f"bench-cpu-{os.getpid()}"
    names = Names(cluster)
    try:
        cpu.build(spec_for(cluster, args.cpu, PERIODS_US[0]), names)
        iterations = calibrate(cluster, args.inference_ms)
        times: dict[tuple[str, int], list[list[float]]] = {}
        for r in range(args.rounds):
            ref = run_workers(cluster, ["board"], iterations, args.inferences)["board"]
            times.setdefault(("whole", 0), []).extend(ref)
            for period in PERIODS_US if r % 2 == 0 else PERIODS_US[::-1]:
                spec = spec_for(cluster, args.cpu, period)
                for d in spec.devices:
                    group = names.cgroup("cpu", "board", d.name)
                    (group / "cpu.cfs_quota_us").write_text("-1")  # period first, then quota
                    (group / "cpu.cfs_period_us").write_text(str(period))
                    (group / "cpu.cfs_quota_us").write_text(str(spec.quota_us(d)))
                got = run_workers(
                    cluster, [f"board/{d}" for d in SHARES], iterations, args.inferences
                )
                for d in SHARES:
                    times.setdefault((d, period), []).extend(got[f"board/{d}"])
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        cpu.teardown(names)
    report(times, args)


def report(times: dict[tuple[str, int], list[list[float]]], args: argparse.Namespace) -> None:
    """Two tables: inference wall times (what a run sees, other load included), and CPU plus
    throttled time (what the quota alone makes of an inference: time waiting for other
    processes left out)."""
    ref = times["whole", 0]
    whole = statistics.median(c for _, c, _ in ref)  # CPU time of an inference
    print(f"CPU {args.cpu}: an inference is {whole * 1e3:.1f} ms of CPU (whole CPU: wall "
          f"{statistics.median(w for w, _, _ in ref) * 1e3:.1f} ms, spread "
          f"{100 * spread([w for w, _, _ in ref]):.0f} %), {len(ref)} per cell, load average "
          f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    for title, measure in (
        ("wall time per inference", lambda w, c, q: w),
        ("CPU + throttled time per inference (other load left out)", lambda w, c, q: c + q),
    ):
        print(f"\n{title}: median (expected = CPU time / share), off, spread p10-p90")
        print(f"{'period':>9}  " + "  ".join(f"{'share ' + str(s):>30}" for s in SHARES.values()))
        for period in PERIODS_US:
            cells = []
            for d, share in SHARES.items():
                xs = [measure(*x) for x in times[d, period]]
                med, expected = statistics.median(xs), whole / share
                off = 100 * (med / expected - 1)
                cells.append(
                    f"{med * 1e3:6.1f} ({expected * 1e3:5.1f}) ms {off:+5.1f} % "
                    f"{100 * spread(xs):4.0f} %"
                )
            print(f"{period / 1000:>6g} ms  " + "  ".join(f"{c:>30}" for c in cells))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
