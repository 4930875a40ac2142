"""Does a message between hosts move while its sender computes? With and without Open MPI's
TCP progress thread (``dse.runtime.launch.mpiexec.MPI_ENV``).

    python scripts/bench_progress.py [--rounds 3] [--busy-ms 200]

Two ranks on this machine talk over TCP (``--mca btl tcp,self``), as ranks on two hosts do.
Rank 0 posts a send (``Isend``), then computes for ``--busy-ms`` without any MPI call, as a
rank runs its next sub-model in onnxruntime; rank 1 posts its receive 5 ms after the send.
Printed per message size and setting: when rank 1 had the whole message, the median over
iterations and rounds (interleaved), and its range. A message above TCP's eager limit (64 kB)
waits for the receiver's go-ahead, which the sender acts on only in an MPI call unless the
progress thread does it: without the thread the message arrives after the sender's work.
Run it on a quiet machine: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from dse.runtime.launch.mpiexec import MPI_ENV, ROOT_ENV, mpiexec_path

SIZES = (40_000, 8_000_000)  # below TCP's eager limit, far above it
ITERATIONS = 5
MARK = "bench-progress: "
THREAD = "OMPI_MCA_btl_tcp_progress_thread"


def rank(nbytes: int, busy_s: float) -> None:
    """Both ranks; rank 1 prints its receive times (s after the send) as JSON after MARK."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = np.ones(nbytes, dtype=np.uint8)
    got = []
    for _ in range(ITERATIONS + 1):  # one to warm up
        comm.Barrier()
        t0 = time.perf_counter()
        if comm.Get_rank() == 0:
            req = comm.Isend(buf, dest=1, tag=7)
            while time.perf_counter() < t0 + busy_s:  # work without MPI calls
                pass
            req.Wait()
        else:
            time.sleep(0.005)
            comm.Recv(np.empty_like(buf), source=0, tag=7)
            got.append(time.perf_counter() - t0)
    if comm.Get_rank() == 1:
        print(MARK + json.dumps(got[1:]), flush=True)


def measure(nbytes: int, busy_s: float, thread: bool) -> list[float]:
    cmd = [mpiexec_path(), "-n", "2", "--mca", "btl", "tcp,self",
           "--mca", "btl_tcp_progress_thread", "1" if thread else "0",
           sys.executable, __file__, "--rank", str(nbytes), str(busy_s)]  # fmt: skip
    # the launcher's settings but the one compared, which --mca alone sets here
    ours = {k: v for k, v in MPI_ENV.items() if k != THREAD}
    env = {**{k: v for k, v in os.environ.items() if k != THREAD}, **ROOT_ENV, **ours}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith(MARK))
    return json.loads(line[len(MARK) :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy-ms", type=float, default=200.0)
    ap.add_argument("--rank", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank:
        rank(int(a.rank[0]), float(a.rank[1]))
        return
    busy = a.busy_ms / 1e3
    cases = [(n, t) for n in SIZES for t in (False, True)]
    times: dict[tuple[int, bool], list[float]] = {c: [] for c in cases}
    for r in range(a.rounds):
        for c in cases if r % 2 == 0 else cases[::-1]:
            times[c] += measure(c[0], busy, c[1])
    print(f"rank 0 sends, then works {a.busy_ms:.0f} ms without MPI calls; rank 1's receive "
          f"complete after (ms; median, min-max of {a.rounds} x {ITERATIONS}):")  # fmt: skip
    print(f"{'bytes':>10}  {'progress thread':<16} {'median':>8}  range")
    for n, t in cases:
        v = [x * 1e3 for x in times[(n, t)]]
        print(f"{n:>10}  {'on' if t else 'off':<16} {statistics.median(v):8.1f}  "
              f"{min(v):.1f}-{max(v):.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
