"""How much a waiting rank slows the device that shares its CPU, per scheduling policy.

    python scripts/cluster_neighbour.py [--cpu 1] [--bursts 30] [--rounds 3]   (as root)

Two devices of shares 0.6 and 0.4 share one CPU, as edge1 of conf/platform/edge3_*.yaml (built
by dse.cluster.cpu, under each ``cpu_share``). A worker in dev60 computes bursts of 20 ms of CPU
time (single-threaded float32 matrix products), each after 20 ms of waiting, as a rank computes
its part between messages. Beside it, dev40 either holds nothing or a rank that waits for a
message: :func:`dse.runtime.rank.waits.until` with the cluster's wait (it polls for
``dse.cluster.mpi.WAIT_US`` microseconds, then polls between sleeps of
``dse.runtime.rank.waits.SLEEP_S``), for a message that never comes. Both run under the policy
compared: ``normal`` (SCHED_OTHER: a waking process may preempt the one running) or ``batch``
(SCHED_BATCH, as the cluster's launcher runs everything it puts on a board: a waking process
waits for the scheduler's next decision).

Per mechanism and policy: the worker's median wall time per burst and its CPU time, alone and
beside the waiting rank, and how much longer a burst took beside it; and the waiting rank's
delay in seeing a message (the mean time from a random moment to its next poll). Everything
runs interleaved in rounds; needs root and cgroup v1 (cpu, cpuset, memory); its cgroups are
``dse.bench-neighbour-<pid>-<mechanism>``, removed at the end.
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
from cluster_cpu import clusters_per_mechanism  # this script's neighbour: the same devices

from dse.cluster import cpu
from dse.cluster.mpi import WAIT_US
from dse.cluster.names import Names
from dse.runtime.rank.waits import until

MECHANISMS = ("corunner", "quota")
POLICIES = {"normal": os.SCHED_OTHER, "batch": os.SCHED_BATCH}
NEIGHBOURS = ("none", "waiting")
GAP_S = 0.020
N, PRODUCTS = 256, 60  # a burst's work
PERIOD_US = 10_000  # the quotas' (the cluster's default)


def worker(cluster: str, policy: str, bursts: int) -> None:
    """In dev60: bursts after gaps; prints [[wall, cpu], ...] as JSON."""
    cpu.join(os.getpid(), Names(cluster), "board", "dev60")
    os.sched_setscheduler(0, POLICIES[policy], os.sched_param(0))
    a, b = np.random.default_rng(0).standard_normal((2, N, N), dtype=np.float32)
    out = []
    for _ in range(bursts + 2):  # two to warm up
        time.sleep(GAP_S)
        t, c = time.perf_counter(), time.thread_time()
        for _ in range(PRODUCTS):
            a @ b
        out.append([time.perf_counter() - t, time.thread_time() - c])
    json.dump(out[2:], sys.stdout)


def waiter(cluster: str, policy: str) -> None:
    """In dev40: wait as a rank does until stdin closes; prints its polls' times as JSON."""
    cpu.join(os.getpid(), Names(cluster), "board", "dev40")
    os.sched_setscheduler(0, POLICIES[policy], os.sched_param(0))
    fd = sys.stdin.fileno()
    os.set_blocking(fd, False)
    polls: list[float] = []

    def done() -> bool:
        polls.append(time.perf_counter())
        try:
            return os.read(fd, 1) == b""  # closed
        except BlockingIOError:
            return False

    until(done, float(WAIT_US) * 1e-6)
    json.dump(polls, sys.stdout)


def run(cluster: str, spec, policy: str, neighbour: str, bursts: int) -> tuple[list, float]:
    """The worker's [[wall, cpu], ...] and the waiter's mean delay (s; nan without one)."""
    names = Names(cluster)
    corunners = cpu.start_corunners(spec, names, "board")  # none under quotas
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    me = [sys.executable, __file__]
    waiting = None
    try:
        if neighbour == "waiting":
            waiting = subprocess.Popen([*me, "--waiter", cluster, policy], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, env=env)  # fmt: skip
            time.sleep(0.2)
        got = subprocess.run([*me, "--worker", cluster, policy, str(bursts)], capture_output=True,
                             text=True, env=env, check=True).stdout  # fmt: skip
        delay = float("nan")
        if waiting is not None:
            polls, _ = waiting.communicate()  # closes its stdin: it stops waiting
            gaps = np.diff(json.loads(polls))
            delay = float((gaps**2).sum() / (2 * gaps.sum()))  # mean residual of a poll gap
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.wait()
        for p in corunners:
            p.kill()
            p.wait()
    return json.loads(got), delay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=int, default=1, help="the CPU both devices share")
    ap.add_argument("--bursts", type=int, default=30, help="the worker's bursts per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--waiter", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]))
        return
    if args.waiter:
        waiter(*args.waiter)
        return
    clusters, specs = clusters_per_mechanism("neighbour", args.cpu, PERIOD_US, MECHANISMS)
    bursts: dict[tuple[str, str, str], list] = {}
    delays: dict[tuple[str, str], list[float]] = {}
    try:
        for m in MECHANISMS:
            cpu.build(specs[m], Names(clusters[m]))
        for r in range(args.rounds):
            order = [(m, p, n) for m in MECHANISMS for p in POLICIES for n in NEIGHBOURS]
            for m, p, n in order if r % 2 == 0 else order[::-1]:
                got, delay = run(clusters[m], specs[m], p, n, args.bursts)
                bursts.setdefault((m, p, n), []).extend(got)
                if n == "waiting":
                    delays.setdefault((m, p), []).append(delay)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for m in MECHANISMS:
            cpu.teardown(Names(clusters[m]))
    print(f"dev60 (share 0.6): bursts of {PRODUCTS} products of {N} x {N} matrices after "
          f"{GAP_S * 1e3:g} ms of waiting, medians of {args.rounds * args.bursts}; dev40 alone "
          f"or waiting (polls {WAIT_US} us, then sleeps), CPU {args.cpu}")  # fmt: skip
    print(
        "mechanism  policy  burst alone (cpu)    beside a waiting rank (cpu)  longer  "
        "waiting rank's delay"
    )
    for m in MECHANISMS:
        for p in POLICIES:
            (wa, ca), (wb, cb) = (
                [statistics.median(x[j] for x in bursts[m, p, n]) * 1e3 for j in (0, 1)]
                for n in NEIGHBOURS
            )
            delay = statistics.median(delays[m, p]) * 1e6
            print(f"{m:<9}  {p:<6}  {wa:6.1f} ms ({ca:4.1f})     {wb:6.1f} ms ({cb:4.1f})"
                  f"           {100 * (wb / wa - 1):+5.1f} %  {delay:6.0f} us")  # fmt: skip


if __name__ == "__main__":
    main()
