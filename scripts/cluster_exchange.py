"""What a message costs on an emulated cluster while its devices compute, per pair of devices.

    python -m dse.cluster up platform=edge3_ethernet
    python scripts/cluster_exchange.py [--cluster edge3_ethernet] [--rounds 3]

Two ranks, each on its device's cgroups as the runtime's are (the cluster's rank script:
CPU share, memory cap, ``DSE_PACE``), repeat a step 6 times:

``exchange``
    both compute for 4 ms, each its device's speed times that in CPU time (paced to its
    device's speed, as the runtime's onnxruntime runs are: :mod:`dse.runtime.rank.pace`), as a
    layer split in proportion to the devices' speeds; then each sends the other its part and
    receives the other's, as split parts are gathered on both (the sends completed at the
    end of the iteration, as the runtime completes them at the end of an inference);
``handoff``
    one computes 4 ms of CPU time and sends, the other receives, then computes and sends
    back: a vertical cut.

Every wait is the runtime's (:class:`dse.runtime.rank.waits.Waits` with the cluster's setting).
Printed per pattern, pair and message size: the time per step beyond the compute the pattern
needs (4 ms, for an exchange; both devices' in turn, for a handoff), the median
over iterations and then over rounds (interleaved). The pairs: the two devices of a board
(sharing its CPUs by time slices) and a device of each of two boards. Runs one at a time on the
cluster (:func:`dse.cluster.state.one_run`); run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PATTERNS = ("exchange", "handoff")
SIZES = (400, 40_000, 400_000)  # below the shared-memory eager limit, above it, large
STEPS, WORK_MS, ITERATIONS = 6, 4.0, 10
MARK = "cluster-exchange: "


def worker(pattern: str, nbytes: int) -> None:
    """One rank's steps (run by mpiexec through the cluster's rank script); rank 0 prints
    each rank's [[seconds per iteration, compute seconds], ...] as JSON after MARK."""
    import numpy as np
    from mpi4py import MPI

    from dse.runtime.rank.pace import pace_from_env
    from dse.runtime.rank.waits import Waits, spin_s

    comm = MPI.COMM_WORLD
    rank, other = comm.Get_rank(), 1 - comm.Get_rank()
    pace = pace_from_env()
    waits = Waits(comm, spin_s(), pace)
    out = [np.ones(nbytes // 4, np.float32) for _ in range(STEPS)]
    back = np.empty(nbytes // 4, np.float32)

    # an exchange's parts are in proportion to the devices' speeds: both take WORK_MS
    work_s = WORK_MS * 1e-3 * ((pace.speed or 1.0) if pace and pattern == "exchange" else 1.0)

    def compute() -> float:
        credit = pace.start() if pace is not None else 0.0
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while time.process_time() - cpu0 < work_s:
            pass
        if pace is not None:
            pace.until(wall0, cpu0, credit)
        return time.perf_counter() - wall0

    rows = []
    for it in range(ITERATIONS + 2):
        waits.barrier()
        t0, busy, sends = time.perf_counter(), 0.0, []
        for step in range(STEPS):
            if pattern == "exchange":
                busy += compute()
                if sends:
                    MPI.Request.Testall(sends)  # as the runtime, after each run
                sends.append(comm.Isend(out[step], dest=other, tag=step))
                waits.probe(other, step)
                waits.recv(back, other, step)
            elif step % 2 == rank:
                busy += compute()
                waits.send(out[step], other, step)
            else:
                waits.probe(other, step)
                waits.recv(back, other, step)
        waits.complete(sends)  # as the runtime, at the end of the inference
        if it >= 2:  # two warm-up iterations
            rows.append([time.perf_counter() - t0, busy])
    every = comm.gather(rows, root=0)
    if rank == 0:
        print(MARK + json.dumps(every), flush=True)


def extra_ms(pattern: str, ranks: list[list[list[float]]]) -> float:
    """Per step, the median iteration's time beyond the compute the pattern needs."""
    per_iteration = []
    exchange = pattern == "exchange"
    for k in range(len(ranks[0])):
        total = max(r[k][0] for r in ranks)
        # an exchange: both devices' 4 ms side by side; a handoff: each one's in turn
        needed = STEPS * WORK_MS * 1e-3 if exchange else sum(r[k][1] for r in ranks)
        per_iteration.append((total - needed) / STEPS * 1e3)
    return statistics.median(per_iteration)


def pairs(spec) -> list[tuple[str, str, str]]:
    """(label, device, device): a board's two devices, and a device of each of two boards."""
    out = []
    shared = next((b for b in spec.boards if len(spec.devices_of(b.name)) >= 2), None)
    if shared is not None:
        a, b = spec.devices_of(shared.name)[:2]
        out.append((f"one board ({shared.name})", a.name, b.name))
        other = next((b for b in spec.boards if b.name != shared.name), None)
        if other is not None:
            out.append(
                (f"two boards ({other.name}, {shared.name})",
                 spec.devices_of(other.name)[0].name, a.name)
            )  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="edge3_ethernet")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", nargs=2, metavar=("PATTERN", "BYTES"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], int(a.worker[1]))
        return 0
    import tempfile

    from dse.cluster.mpi import command
    from dse.cluster.state import load, one_run
    from dse.errors import DseError
    from dse.runtime.launch.mpiexec import mpiexec_path

    try:
        state = load(a.cluster)
    except DseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    chosen = pairs(state.spec)
    if not chosen:
        print(f"error: cluster {a.cluster} has no board of two devices", file=sys.stderr)
        return 1
    cases = [(p, c, n) for p in PATTERNS for c in chosen for n in SIZES]
    got: dict[tuple, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="dse-exchange-") as tmp, one_run(state):
        for r in range(a.rounds):
            for pattern, pair, nbytes in cases:
                _, d0, d1 = pair
                program = [sys.executable, os.path.abspath(__file__), "--worker", pattern,
                           str(nbytes)]  # fmt: skip
                cmd, env = command(state, [d0, d1], tmp, program, mpiexec_path())
                run = subprocess.run(
                    cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=300
                )
                line = next((x for x in run.stdout.splitlines() if x.startswith(MARK)), None)
                if run.returncode or line is None:
                    why = " | ".join(run.stderr.strip().splitlines()[-3:])
                    print(f"error: {pattern} on {d0}, {d1} failed: {why}", file=sys.stderr)
                    return 1
                ranks = json.loads(line[len(MARK) :])
                got.setdefault((pattern, pair, nbytes), []).append(extra_ms(pattern, ranks))
            print(f"round {r + 1} of {a.rounds} done", file=sys.stderr, flush=True)
    print(f"cluster {a.cluster}: {STEPS} steps of {WORK_MS:g} ms per device (paced), "
          f"{ITERATIONS} iterations, {a.rounds} rounds interleaved")  # fmt: skip
    print(f"{'pattern':9s} {'devices':42s} {'bytes':>8s} {'per step':>9s}  rounds")
    for (pattern, (label, d0, d1), nbytes), values in got.items():
        devices = f"{label}: {d0}, {d1}"
        spread = " ".join(f"{v:.2f}" for v in values)
        median = statistics.median(values)
        print(f"{pattern:9s} {devices:42s} {nbytes:8d} {median:7.2f} ms  {spread}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
