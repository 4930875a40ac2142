"""The self-check's measuring programs, run on the cluster's boards.

``python -m mpi4py -m dse.cluster.probe links SIZE REPS``, one rank per board: for every
pair of boards in turn (the others wait), 1-byte ping-pongs give the latency, SIZE-byte
ping-pongs the rate of one transfer alone, and SIZE-byte two-way exchanges the rate of both
directions at once (on a shared medium they share it). Rank 0 prints the times on one line,
:data:`LINKS` then JSON (mpiexec brings it back from the board: boards have disks of their
own).

``python -m dse.cluster.probe compute CLUSTER BOARD DEVICES ROUNDS CHUNK_MS`` (no MPI): a fixed
compute kernel (single-threaded float32 matrix products) timed in rounds, wall and CPU time; in
each round the process runs one chunk of it in the board's cgroup (the board's CPUs, no share)
and one in each device's (its share), moving itself between them, with the board's co-runners
(if any) running as the launcher starts them (:func:`dse.cluster.cpu.corunner_groups`; stopped
for the board's chunk), and a device's chunk paced as a rank on the device is
(:func:`dse.cluster.cpu.pace_speed`). The board's chunk, per second of CPU it got, is what a
whole CPU does; a device's, per second of wall time, what the device does. Measured in the
same rounds, they see the same moment of a machine whose load changes. Prints JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from dse.cluster.cpu import join, pace_speed, start_corunners
from dse.cluster.names import Names
from dse.cluster.state import load
from dse.runtime.rank.pace import Pace

LATENCY_REPS = 200
KERNEL_N = 128


def _pingpong(comm: Any, peer: int, buf: Any, first: bool) -> None:
    if first:
        comm.Send(buf, peer)
        comm.Recv(buf, peer)
    else:
        comm.Recv(buf, peer)
        comm.Send(buf, peer)


def _pair(comm: Any, peer: int, first: bool, size: int, reps: int) -> dict[str, list[float]]:
    """Times (s) between this rank and ``peer``: one-way latency, one-way transfer, exchange."""
    tiny, big = np.zeros(1, np.uint8), np.zeros(size, np.uint8)
    back = np.zeros(size, np.uint8)
    _pingpong(comm, peer, big, first)  # connection set up, TCP window grown
    lat = []
    for _ in range(LATENCY_REPS):
        t = time.perf_counter()
        _pingpong(comm, peer, tiny, first)
        lat.append((time.perf_counter() - t) / 2)
    one, both = [], []
    for _ in range(reps):
        t = time.perf_counter()
        _pingpong(comm, peer, big, first)
        one.append((time.perf_counter() - t) / 2)
        _pingpong(comm, peer, tiny, first)  # both start together (the peer a latency ahead)
        t = time.perf_counter()
        comm.Sendrecv(big, peer, recvbuf=back, source=peer)
        _pingpong(comm, peer, tiny, first)  # until both have received all (sends return early)
        both.append(time.perf_counter() - t)
    return {"latency_s": lat, "one_way_s": one, "exchange_s": both}


#: What starts the line of the link probe's times on rank 0's output.
LINKS = "dse-links: "


def links(size: int, reps: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    host = MPI.Get_processor_name()
    hosts = comm.allgather(host)
    mine = []
    for i in range(n):
        for j in range(i + 1, n):
            comm.Barrier()
            if rank in (i, j):
                times = _pair(comm, j if rank == i else i, rank == i, size, reps)
                if rank == i:
                    mine.append({"a": hosts[i], "b": hosts[j], **times})
    pairs = comm.gather(mine, root=0)
    if rank == 0:
        assert pairs is not None  # gather gives the root every rank's list
        result = {"size": size, "hosts": hosts, "pairs": [p for ps in pairs for p in ps]}
        print(LINKS + json.dumps(result), flush=True)


def _chunk(a: Any, b: Any, iterations: int, pace: Pace | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of ``iterations`` products, paced as a rank's run is if ``pace``."""
    t, c, c0 = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(iterations):
        a @ b
    cpu = time.thread_time() - c
    if pace is not None:
        pace.until(t, c0)
    return time.perf_counter() - t, cpu


@contextlib.contextmanager
def _paused(procs: list[subprocess.Popen]) -> Iterator[None]:
    for p in procs:
        os.kill(p.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)


def compute(cluster: str, board: str, devices: list[str], rounds: int, chunk_ms: float) -> None:
    names = Names(cluster)
    spec = load(cluster).spec
    corunners = start_corunners(spec, names, board)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((KERNEL_N, KERNEL_N), dtype=np.float32) for _ in range(2))
    join(os.getpid(), names, board)
    _chunk(a, b, 20)
    iterations = 1
    while _chunk(a, b, iterations)[1] < chunk_ms / 1e3 / 4:  # a quarter chunk, then scale
        iterations *= 2
    iterations *= 4
    wall: dict[str, list[float]] = {board: [], **{d: [] for d in devices}}
    cpu: dict[str, list[float]] = {board: [], **{d: [] for d in devices}}
    for _ in range(rounds):
        for target in (board, *devices):
            join(os.getpid(), names, *((board,) if target == board else (board, target)))
            speed = None if target == board else pace_speed(spec, target)
            with _paused(corunners) if target == board else contextlib.nullcontext():
                w, c = _chunk(a, b, iterations, None if speed is None else Pace(speed))
            wall[target].append(w)
            cpu[target].append(c)
    json.dump({"board": board, "iterations": iterations, "wall_s": wall, "cpu_s": cpu}, sys.stdout)


def main(argv: list[str]) -> None:
    if argv[:1] == ["links"] and len(argv) == 3:
        links(int(argv[1]), int(argv[2]))
    elif argv[:1] == ["compute"] and len(argv) == 6:
        devices = [d for d in argv[3].split(",") if d]
        compute(argv[1], argv[2], devices, int(argv[4]), float(argv[5]))
    else:
        sys.exit(
            "usage: probe links SIZE REPS | probe compute CLUSTER BOARD DEVICES ROUNDS CHUNK_MS"
        )


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main(sys.argv[1:])
