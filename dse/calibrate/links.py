"""Link micro-benchmark: ping-pong and two-way exchanges between two ranks, by message size.

Run under MPI by :func:`measure_link` (``mpiexec -n 2 python -m mpi4py -m
dse.calibrate.links``: rank 0 prints the table on one line after :data:`TABLE`, and mpiexec
brings it back from a board with a disk of its own), with the buffer API the runtime uses
(``Isend`` / ``Probe`` + ``Recv``). Per size: the median one-way time of a ping-pong (round
trip / 2) and of a two-way exchange (both ranks send at once, the time until both messages are
in), and their spread (p90 - p10) / median. :func:`measure_links` runs it once per link class
the platform's device pairs use.
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

from dse.calibrate.journal import key_of
from dse.errors import DseError
from dse.files import scratch
from dse.platform import Platform
from dse.runtime.deployment.layout import HOSTFILE, RANKFILE
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.launch.mpiexec import Launcher, captured, mpi_files, placement
from dse.runtime.rank.waits import Waits, spin_s
from models_analytical.coefficients import Curve, port_key

#: The flag that asks the benchmark for fewer exchanges per size.
FEW = "--few-repeats"
#: The flag (with a number of bytes) that leaves out larger messages.
MAX = "--max-bytes="

#: What starts the line of rank 0's output that holds the table (JSON).
TABLE = "dse-link-table: "
#: Message sizes (bytes): 64 B to 64 MiB, every factor of 4.
SIZES = tuple(64 * 4**k for k in range(11))


def _repeats(nbytes: int, few: bool) -> int:
    n = 40 if nbytes < 1 << 20 else 12 if nbytes < 1 << 24 else 6
    return max(3, n // 4) if few else n


def bench(comm: Any, few: bool = False, max_bytes: int | None = None) -> dict[str, Any] | None:
    """Both ranks call this; rank 0 returns the table. The ranks wait as the runtime's do
    (:mod:`dse.runtime.rank.waits`: spinning in MPI's blocking calls, or polling then sleeping
    where ``DSE_WAIT_SPIN_US`` says so, as on an emulated cluster)."""
    me = comm.Get_rank()
    other = 1 - me
    w = Waits(comm, spin_s())
    rows = []
    for size in [x for x in SIZES if max_bytes is None or x <= max_bytes]:
        buf = np.ones(size, dtype=np.uint8)
        got = np.empty(size, dtype=np.uint8)
        reps = _repeats(size, few)
        one, two = [], []
        for r in range(reps + 2):  # two warm-up exchanges per size
            w.barrier()
            t0 = time.perf_counter()
            if me == 0:
                w.send(buf, other, 1)
                w.probe(other, 2)
                w.recv(got, other, 2)
            else:
                w.probe(other, 1)
                w.recv(got, other, 1)
                w.send(buf, other, 2)
            rtt = time.perf_counter() - t0
            w.barrier()
            t0 = time.perf_counter()
            req = comm.Isend(buf, dest=other, tag=3)
            w.probe(other, 3)
            w.recv(got, other, 3)
            w.complete([req])
            both = w.max(time.perf_counter() - t0)
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
    platform: Platform,
    a: int,
    b: int,
    few: bool = False,
    launcher: Launcher | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Run the benchmark between devices ``a`` and ``b`` of ``platform`` (their hosts and
    cores, as a deployment binds them, started by ``launcher``; ``few``: a quarter of the
    exchanges per size, at least 3; ``max_bytes``: no larger messages); the table as
    :func:`bench` returns it."""
    launcher = launcher or Launcher()
    with scratch("links-") as tmp:
        d = Path(tmp)
        hostfile, rankfile = mpi_files(platform, [a, b], launcher)
        (d / HOSTFILE).write_text(hostfile)
        (d / RANKFILE).write_text(rankfile)
        program = [sys.executable, "-m", "mpi4py", "-m", "dse.calibrate.links"]
        ranks = placement(platform, [a, b])
        flags = [*([FEW] if few else []), *([f"{MAX}{max_bytes}"] if max_bytes else [])]
        cmd = launcher.mpiexec_command(2, d, [*program, *flags], placement=ranks)
        env = launcher.environment()
        with launcher.watched(ranks) as finish:
            try:
                proc = captured(cmd, env, 600)
                why = f"{proc.returncode}: " + " | ".join(proc.stderr.strip().splitlines()[-3:])
            except subprocess.TimeoutExpired:
                proc, why = None, "timed out after 600 s"
            line = next(
                (t for t in (proc.stdout if proc else "").splitlines() if t.startswith(TABLE)), None
            )
            if proc is None or proc.returncode != 0 or line is None:
                result = Measurement.failed(f"the link benchmark failed under mpiexec ({why})")
                raise DseError(finish(result).reason or why)
        return json.loads(line[len(TABLE) :])


def link_pairs(platform: Platform) -> dict[str, tuple[int, int]]:
    """Per link class the platform's device pairs use, the first such pair."""
    pairs: dict[str, tuple[int, int]] = {}
    n = len(platform.devices)
    for a in range(n):
        for b in range(n):
            if a != b:
                pairs.setdefault(platform.link_class(a, b), (a, b))
    return pairs


def board_pairs(platform: Platform) -> list[tuple[int, int]]:
    """On a switched network of several boards, every pair of boards, each by its first
    device (the ports' benchmark); else none."""
    if platform.network != "switched":
        return []
    first = {h: next(i for i, d in enumerate(platform.devices) if d.host == h)
             for h in platform.hosts}  # fmt: skip
    boards = list(first.values())
    return [(a, b) for i, a in enumerate(boards) for b in boards[i + 1 :]]


def link_runs(platform: Platform) -> int:
    """How many benchmarks :func:`measure_links` runs."""
    pairs = link_pairs(platform)
    extra = [p for p in board_pairs(platform) if p != pairs.get("network")]
    return len(pairs) + len(extra)


def fit_link(table: dict[str, Any]) -> dict[str, float]:
    """Latency and bandwidth of a benchmark's one-way times: the latency is the smallest
    message's time, the bandwidth one over the least-squares slope of the times of messages
    of 1 MiB and more (where a size's fixed costs no longer show)."""
    x = np.asarray(table["bytes"], dtype=np.float64)
    y = np.asarray(table["one_way_s"], dtype=np.float64)
    big = x >= 1 << 20
    slope = np.polyfit(x[big], y[big], 1)[0] if big.sum() >= 2 else y[-1] / x[-1]
    return {"latency_s": float(y[0]), "bandwidth_Bps": float(1.0 / max(slope, 1e-15))}


#: A message under 1 MiB whose one-way time exceeds its link's line (:func:`fit_link`) by more
#: than both of these is a step at small messages (:func:`small_message_step`).
STEP_EXCESS_S = 1e-3
STEP_RATIO = 1.5


def small_message_step(table: dict[str, Any]) -> dict[str, float] | None:
    """The worst message under 1 MiB of a one-way table that takes more than its link's line
    (the smallest message's time + bytes / the large messages' bandwidth) by over
    :data:`STEP_EXCESS_S` and :data:`STEP_RATIO` times: ``{"bytes", "seconds", "line_s"}``;
    None if there is none. On an emulated cluster such a step is what a process busy on the
    machine's CPUs during the benchmark leaves (each message waits for the kernel's deferred
    network work, up to a scheduler tick), not the link (``scripts/link_busy.py``;
    ``docs/results/cluster.md``, "Wi-Fi's small-message step: a busy CPU, not the medium")."""
    fit = fit_link(table)
    steps = [
        {"bytes": float(x), "seconds": float(y), "line_s": float(line)}
        for x, y in zip(table["bytes"], table["one_way_s"], strict=True)
        if x < 1 << 20
        and y - (line := fit["latency_s"] + x / fit["bandwidth_Bps"]) > STEP_EXCESS_S
        and y > STEP_RATIO * line
    ]
    return max(steps, key=lambda s: s["seconds"] / s["line_s"], default=None)


def port_tables(
    platform: Platform, measured: dict[tuple[int, int], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each board's port from the board pairs ``measured`` (one-way tables on one size grid):
    a pair runs at its slower port, so a port's time at each size is the least of its pairs'.
    (The fastest board's port is then known up to the second fastest's: every pair's figures,
    the slower of two ports, come out right all the same.)"""
    out = {}
    for host in platform.hosts:
        mine = [t for (a, b), t in measured.items()
                if host in (platform.devices[a].host, platform.devices[b].host)]  # fmt: skip
        if not mine:
            continue
        seconds = np.min([t["one_way_s"] for t in mine], axis=0)
        table = {"bytes": mine[0]["bytes"], "one_way_s": [float(x) for x in seconds]}
        out[host] = {**table, "pairs": len(mine), "fit": fit_link(table)}
    return out


def step_note(table: dict[str, Any]) -> dict[str, Any]:
    """``{"small_message_step": ...}`` where a benchmark's table has one
    (:func:`small_message_step`), else nothing: what a table's provenance carries."""
    step = small_message_step(table)
    return {"small_message_step": step} if step is not None else {}


@dataclass(frozen=True)
class LinkTables:
    """Per link class (and, on a switched network, per board's port: ``port:BOARD``): the
    one-way time by message size the model reads, and the benchmarks' full tables with their
    fitted latency and bandwidth (provenance)."""

    tables: dict[str, Curve]
    provenance: dict[str, Any]


def measure_links(
    platform: Platform,
    few: bool,
    tick: Callable[[str], None] = lambda _: None,
    launcher: Launcher | None = None,
    max_bytes: int | None = None,
    take: Callable[[str, Callable[[], dict[str, Any]]], dict[str, Any]] | None = None,
) -> LinkTables:
    """One table per link class that a pair of the platform's devices uses (measured between
    the first such pair, its ranks started by ``launcher``, over the links a deployment's
    ranks use: TCP through the boards' ports between boards, shared memory within one); on a
    switched network every pair of boards too, for a table per port (:func:`port_tables`);
    ``tick`` after each benchmark; each benchmark through ``take`` (a calibration's journal,
    :meth:`dse.calibrate.journal.Journal.take`)."""
    tables, prov = {}, {}

    def bench_pair(a: int, b: int) -> dict[str, Any]:
        names = [platform.devices[a].name, platform.devices[b].name]
        key = key_of("link", {"devices": names, "few": few, "max_bytes": max_bytes})
        measure = lambda: measure_link(platform, a, b, few, launcher, max_bytes)  # noqa: E731
        return take(key, measure) if take is not None else measure()

    pairs = link_pairs(platform)
    measured: dict[tuple[int, int], dict[str, Any]] = {}
    for cls, (a, b) in pairs.items():
        t = bench_pair(a, b)
        tables[cls] = Curve(bytes=t["bytes"], seconds=t["one_way_s"])
        names = [platform.devices[a].name, platform.devices[b].name]
        prov[cls] = {"devices": names, **t, "fit": fit_link(t), **step_note(t)}
        if cls == "network":
            measured[a, b] = t
        tick(f"link {cls}")
    for a, b in board_pairs(platform):
        if (a, b) not in measured:
            measured[a, b] = bench_pair(a, b)
            tick(f"link {platform.devices[a].host}-{platform.devices[b].host}")
    ports = port_tables(platform, measured)
    for host, t in ports.items():
        tables[port_key(host)] = Curve(bytes=t["bytes"], seconds=t["one_way_s"])
    if ports:
        checked = pairs.get("network")  # its step, if any, is the class's, noted above
        prov["ports"] = {
            "pairs": {
                f"{platform.devices[a].host}-{platform.devices[b].host}": {
                    **fit_link(t),
                    **(step_note(t) if (a, b) != checked else {}),
                }
                for (a, b), t in measured.items()
            },
            **{host: {"pairs": t["pairs"], "fit": t["fit"]} for host, t in ports.items()},
        }
    return LinkTables(tables, prov)


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI  # here only: importing it starts MPI (see bench)

    args = sys.argv[1:] if argv is None else argv
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("the link benchmark needs exactly 2 ranks (mpiexec -n 2)")
    limit = next((int(a[len(MAX) :]) for a in args if a.startswith(MAX)), None)
    table = bench(comm, few=FEW in args, max_bytes=limit)
    if table is not None:
        print(TABLE + json.dumps(table), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
