"""Link micro-benchmark: ping-pong and two-way exchanges between two ranks, by message size.

Run under MPI by :func:`measure_link` (``mpiexec -n 2 python -m mpi4py -m dse.calibrate.links
OUT``), with the buffer API the runtime uses (``Isend`` / ``Probe`` + ``Recv``). Per size: the
median one-way time of a ping-pong (round trip / 2) and of a two-way exchange (both ranks send
at once, the time until both messages are in), and their spread (p90 - p10) / median.
:func:`measure_links` runs it once per link class the platform's device pairs use.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.files import scratch
from dse.platform import Platform
from dse.runtime.lifetime import die_with_parent
from dse.runtime.measurements import failed
from dse.runtime.mpirun import HOSTFILE, RANKFILE, Launcher, mpi_files, placement

#: The flag that asks the benchmark for fewer exchanges per size.
FEW = "--few-repeats"

#: Message sizes (bytes): 64 B to 64 MiB, every factor of 4.
SIZES = tuple(64 * 4**k for k in range(11))


def _repeats(nbytes: int, few: bool) -> int:
    n = 40 if nbytes < 1 << 20 else 12 if nbytes < 1 << 24 else 6
    return max(3, n // 4) if few else n


def bench(comm: Any, few: bool = False) -> dict[str, Any] | None:
    """Both ranks call this; rank 0 returns the table."""
    from mpi4py import MPI  # here only: importing it starts MPI, which the calibration must not

    me = comm.Get_rank()
    other = 1 - me
    rows = []
    for size in SIZES:
        buf = np.ones(size, dtype=np.uint8)
        got = np.empty(size, dtype=np.uint8)
        reps = _repeats(size, few)
        one, two = [], []
        for r in range(reps + 2):  # two warm-up exchanges per size
            comm.Barrier()
            t0 = time.perf_counter()
            if me == 0:
                comm.Send(buf, dest=other, tag=1)
                comm.Probe(source=other, tag=2)
                comm.Recv(got, source=other, tag=2)
            else:
                comm.Probe(source=other, tag=1)
                comm.Recv(got, source=other, tag=1)
                comm.Send(buf, dest=other, tag=2)
            rtt = time.perf_counter() - t0
            comm.Barrier()
            t0 = time.perf_counter()
            req = comm.Isend(buf, dest=other, tag=3)
            comm.Probe(source=other, tag=3)
            comm.Recv(got, source=other, tag=3)
            MPI.Request.Wait(req)
            both = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if r >= 2:
                one.append(rtt / 2)
                two.append(both)
        rows.append({"bytes": size, "one_way": one, "two_way": two})
    if me != 0:
        return None

    def stats(v: list[float]) -> tuple[float, float]:
        a = np.asarray(v)
        med = float(np.median(a))
        return med, float((np.percentile(a, 90) - np.percentile(a, 10)) / med)

    out: dict[str, Any] = {"bytes": [], "one_way_s": [], "two_way_s": [], "spread": []}
    for row in rows:
        m1, s1 = stats(row["one_way"])
        m2, s2 = stats(row["two_way"])
        out["bytes"].append(row["bytes"])
        out["one_way_s"].append(m1)
        out["two_way_s"].append(m2)
        out["spread"].append(round(max(s1, s2), 4))
    return out


def measure_link(
    platform: Platform, a: int, b: int, few: bool = False, launcher: Launcher | None = None
) -> dict[str, Any]:
    """Run the benchmark between devices ``a`` and ``b`` of ``platform`` (their hosts and
    cores, as a deployment binds them, started by ``launcher``; ``few``: a quarter of the
    exchanges per size, at least 3); the table as :func:`bench` returns it."""
    launcher = launcher or Launcher()
    with scratch("links-") as tmp:
        d = Path(tmp)
        hostfile, rankfile = mpi_files(platform, [a, b], launcher)
        (d / HOSTFILE).write_text(hostfile)
        (d / RANKFILE).write_text(rankfile)
        out = d / "links.json"
        program = [sys.executable, "-m", "mpi4py", "-m", "dse.calibrate.links", str(out)]
        ranks = placement(platform, [a, b])
        cmd = launcher.mpiexec_command(2, d, [*program, *([FEW] if few else [])], placement=ranks)
        env = launcher.environment()
        finish = launcher.watch(ranks) if launcher.watch is not None else None
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=600,
                preexec_fn=die_with_parent(),
            )  # fmt: skip
            why = f"{proc.returncode}: " + " | ".join(proc.stderr.strip().splitlines()[-3:])
        except subprocess.TimeoutExpired:
            proc, why = None, "timed out after 600 s"
        if proc is None or proc.returncode != 0 or not out.is_file():
            result = failed(f"the link benchmark failed under mpiexec ({why})")
            raise DseError((finish(result) if finish is not None else result)["reason"])
        return json.loads(out.read_text())


@dataclass(frozen=True)
class LinkTables:
    """Per link class: the one-way time by message size the model reads, and the benchmark's
    full table (provenance)."""

    tables: dict[str, dict[str, list[float]]]
    provenance: dict[str, Any]


def measure_links(
    platform: Platform,
    few: bool,
    tick: Callable[[str], None] = lambda _: None,
    launcher: Launcher | None = None,
) -> LinkTables:
    """One table per link class that a pair of the platform's devices uses (measured between
    the first such pair, its ranks started by ``launcher``); ``tick`` after each."""
    pairs: dict[str, tuple[int, int]] = {}
    n = len(platform.devices)
    for a in range(n):
        for b in range(n):
            if a != b:
                pairs.setdefault(platform.link_class(a, b), (a, b))
    tables, prov = {}, {}
    for cls, (a, b) in pairs.items():
        t = measure_link(platform, a, b, few, launcher)
        tables[cls] = {"bytes": t["bytes"], "seconds": t["one_way_s"]}
        prov[cls] = {"devices": [platform.devices[a].name, platform.devices[b].name], **t}
        tick(f"link {cls}")
    return LinkTables(tables, prov)


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI  # here only: importing it starts MPI (see bench)

    args = sys.argv[1:] if argv is None else argv
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("the link benchmark needs exactly 2 ranks (mpiexec -n 2)")
    table = bench(comm, few=FEW in args)
    if table is not None:
        Path(args[0]).write_text(json.dumps(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
