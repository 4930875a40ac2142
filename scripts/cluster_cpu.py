"""How steady a CFS quota makes a device's speed, per CFS period: prints medians and spreads.

    python scripts/cluster_cpu.py [--cpu 1] [--inference-ms 35] [--inferences 20]
        [--rounds 3]   (as root)

Two devices of shares 0.6 and 0.4 share one CPU (as edge1 of conf/platform/edge3_*.yaml), each
a cgroup with a CFS quota of its share, built by dse.cluster.cpu. A device runs a fixed
"inference" (single-threaded float32 matrix products taking --inference-ms of CPU time, as
ResNet-50 takes ~35 ms in onnxruntime here) back to back: each device alone (a vertical cut:
the other waits), then both at once (split layers, a pipeline). Per period and device, the
median inference time against the expected one (its CPU time / share) and the spread (p10 to
p90 of the inference times, over the median). Periods run interleaved in rounds, so a change
in the machine's load spreads over all of them; a whole CPU without a quota is the reference,
its spread the machine's own noise.

A short period pauses an inference for a short time, but the kernel enforces a quota at its
tick (4 ms at HZ=250) and hands it out in 5 ms slices, so quotas of a few ms run the device
slower than its share; a long period stops an inference for tens of ms at a time. Needs root
and cgroup v1 (cpu, cpuset); its cgroups are ``dse.bench-cpu-<pid>``, removed at the end.
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

from dse.cluster import cpu, system
from dse.cluster.names import Names
from dse.cluster.spec import Board, ClusterSpec, DeviceShare

PERIODS_US = (2_500, 5_000, 10_000, 20_000, 50_000, 100_000)
SHARES = {"dev60": 0.6, "dev40": 0.4}
N = 128


def kernel(iterations: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one inference."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((N, N), dtype=np.float32) for _ in range(2))
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(iterations):
        a @ b
    return time.perf_counter() - t, time.thread_time() - c


def worker(cluster: str, group: str, iterations: int, count: int) -> None:
    """Join ``group`` (board/device) and print the times of ``count`` inferences."""
    cpu.join(os.getpid(), Names(cluster), *group.split("/"))
    kernel(iterations)  # warm
    print(json.dumps([kernel(iterations) for _ in range(count)]))


def spec_for(cluster: str, cpu_id: int, period_us: int, cpu_share: str = "quota") -> ClusterSpec:
    """Two devices of SHARES on one board of CPU ``cpu_id`` (cluster_bursts.py too)."""
    devices = tuple(DeviceShare(n, "board", s, 1024.0) for n, s in SHARES.items())
    return ClusterSpec(cluster, "bench", "switched", 1000.0, (Board("board", (cpu_id,), 1000.0),),
                       devices, period_us, cpu_share=cpu_share)  # fmt: skip


def clusters_per_mechanism(
    what: str, cpu_id: int, period_us: int, mechanisms: tuple[str, ...]
) -> tuple[dict[str, str], dict[str, ClusterSpec]]:
    """For a benchmark of two devices per mechanism (cluster_bursts.py, cluster_neighbour.py):
    check this machine can, warn of other load, and name and describe one cluster each."""
    system.require()
    if os.getloadavg()[0] > 0.5:
        print(f"warning: load average {os.getloadavg()[0]:.1f}: other processes take CPU time "
              "from the devices", file=sys.stderr)  # fmt: skip
    clusters = {m: f"bench-{what}-{os.getpid()}-{m}" for m in mechanisms}
    return clusters, {m: spec_for(clusters[m], cpu_id, period_us, m) for m in mechanisms}


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
        runs = run_workers(cluster, ["board"], iterations, 5)["board"]
        t = statistics.median(c for _, c in runs)  # CPU time: the machine's load aside
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
        times: dict[tuple[str, str, int], list[list[float]]] = {}
        for r in range(args.rounds):
            ref = run_workers(cluster, ["board"], iterations, args.inferences)["board"]
            times.setdefault(("whole", "", 0), []).extend(ref)
            for period in PERIODS_US if r % 2 == 0 else PERIODS_US[::-1]:
                set_period(names, spec_for(cluster, args.cpu, period))
                for mode, groups in [*(("alone", [d]) for d in SHARES), ("together", [*SHARES])]:
                    got = run_workers(
                        cluster, [f"board/{d}" for d in groups], iterations, args.inferences
                    )
                    for d in groups:
                        times.setdefault((mode, d, period), []).extend(got[f"board/{d}"])
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        cpu.teardown(names)
    report(times, args)


def set_period(names: Names, spec: ClusterSpec) -> None:
    for d in spec.devices:
        group = names.cgroup("cpu", "board", d.name)
        (group / "cpu.cfs_quota_us").write_text("-1")  # no quota while the period changes
        (group / "cpu.cfs_period_us").write_text(str(spec.cfs_period_us))
        (group / "cpu.cfs_quota_us").write_text(str(spec.quota_us(d)))


def report(times: dict[tuple[str, str, int], list[list[float]]], args: argparse.Namespace) -> None:
    ref = times["whole", "", 0]
    whole = statistics.median(c for _, c in ref)  # CPU time of an inference
    walls = [w for w, _ in ref]
    print(
        f"CPU {args.cpu}: an inference is {whole * 1e3:.1f} ms of CPU; on a whole CPU "
        f"{statistics.median(walls) * 1e3:.1f} ms, spread {100 * spread(walls):.0f} %; "
        f"{len(ref)} inferences per cell; load average {os.getloadavg()[0]:.1f} at the end"
    )
    for mode in ("alone", "together"):
        print(f"\n{mode}: median inference (expected = CPU time / share), off, spread p10-p90")
        print(f"{'period':>9}  " + "  ".join(f"{'share ' + str(s):>30}" for s in SHARES.values()))
        for period in PERIODS_US:
            cells = []
            for d, share in SHARES.items():
                xs = [w for w, _ in times[mode, d, period]]
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
