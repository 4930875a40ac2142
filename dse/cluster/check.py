"""The cluster's self-check: links and devices measured beside what the platform configures.

**Links**, with MPI over TCP between the boards exactly as the runtime uses them (one rank per
board, launched through the cluster's launcher): per pair of boards, the latency (1 byte), the
rate of one transfer alone and of both directions at once. A link's rate is the best of its
repetitions: shaping can only hold a transfer back, while a loaded machine slows some
repetitions down; the best is what the link delivers, the median what the machine allowed (both
are printed). A link more than ``tolerance`` (10 %) off its configured rate is measured once
more after the devices, and its best over both is kept (:func:`joined`): a machine busy with
other work for a while can hold back every repetition of the first measurement. Still off, it
is an error naming it. TCP's payload is at most 95.6 % of
a rate (1448 bytes of every 1514-byte frame).
Both directions at once tell a switched port (each direction its rate) from a shared medium
(one rate for all): a shared medium must give its rate within the tolerance, a switch clearly
more than one direction's rate (:func:`exchange_ok`), else an error too.

**Devices**: a fixed compute kernel runs in each device's cgroup, interleaved with the same
kernel in the board's cgroup (:mod:`dse.cluster.probe`). A device's speed is the kernel's CPU
time in the board's cgroup (what a whole CPU takes) over its wall time in the device's (median
of the rounds), expected :meth:`ClusterSpec.thread_speed` (the kernel is one thread). "cpu
got" is the device's CPU time over its wall time (what its share let it run); "cpu free" the
same in the board's cgroup with the board's co-runners stopped: below 1, other processes of
this machine took part of the board's CPU, and a device whose share is more than what was left
runs slower than configured.
A share gives its speed on average with more noise than a whole core (the spread column, p10
to p90 of the device's rounds); a device off by more than 15 % is reported, not an error (the
machine's other load moves it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dse.cluster import system
from dse.cluster.mpi import board_files, mpiexec_options
from dse.cluster.probe import LINKS
from dse.cluster.spec import ClusterSpec, DeviceShare, cpu_list, describe_shares
from dse.cluster.state import State, one_run
from dse.errors import DseError
from dse.lifetime import die_with_parent
from dse.runtime.launch.diagnosis import startup_failure
from dse.runtime.launch.mpiexec import mpiexec_path, session_processes, started_again

PAYLOAD = 1448 / 1514
DEVICE_TOLERANCE = 0.15


@dataclass(frozen=True)
class CheckSettings:
    size_mb: float = 4.0  # message of the link rate probes
    reps: int = 5  # repetitions per pair (the best counts)
    rounds: int = 6  # compute rounds per device
    chunk_ms: float = 100.0  # the kernel's time per round at a whole CPU (10 CFS periods)
    tolerance: float = 0.10  # a link further than this from its rate is an error
    timeout_s: float = 300.0


def exchange_ok(network: str, rate: float, both: float, tolerance: float) -> bool:
    """Both directions at once: on a shared medium, the medium's rate (within the tolerance);
    on a switch, clearly more than one direction's rate (each direction has its own; a loaded
    machine may not reach twice the rate, but no shared channel gives more than once)."""
    if network == "shared":
        return abs(both / rate - 1) <= tolerance
    return both > (1 + tolerance) * rate


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def run_links(state: State, settings: CheckSettings) -> dict[str, Any]:
    """The link probe's raw times (one mpiexec over every board)."""
    boards = [b.name for b in state.spec.boards]
    if len(boards) < 2:
        return {"size": 0, "hosts": boards, "pairs": []}
    with tempfile.TemporaryDirectory(prefix="dse-cluster-check-") as tmp:
        files = board_files(state, boards, Path(tmp))
        args, env = mpiexec_options(state)
        size = max(1, int(settings.size_mb * 2**20))
        program = [sys.executable, "-m", "mpi4py", "-m", "dse.cluster.probe", "links"]
        cmd = [mpiexec_path(), *args, "-n", str(len(boards)), *files.args(), *program]
        cmd += [str(size), str(settings.reps)]
        output = run_mpi(cmd, {**os.environ, **env}, settings.timeout_s, Path(tmp))
        line = next((t for t in output.splitlines() if t.startswith(LINKS)), None)
        if line is None:
            raise DseError(f"the link check's rank 0 printed no times: {output[-300:]!r}")
        return json.loads(line[len(LINKS) :])


def run_mpi(cmd: list[str], env: dict[str, str], timeout_s: float, cwd: Path) -> str:
    """Run an mpiexec command on the cluster, again after a startup failure that does not
    last (:data:`dse.runtime.launch.diagnosis.STARTUP_FAILURES`); its output. Nothing of it
    outlives this call."""
    log = cwd / "mpiexec.log"
    code = started_again(
        lambda: _run_once(cmd, env, timeout_s, cwd, log),
        lambda c: c != 0 and startup_failure(log.read_text(errors="replace")),
    )
    if code != 0:
        tail = [t for t in log.read_text(errors="replace").splitlines() if t.strip()][-3:]
        why = "timed out" if code is None else f"exited with {code}"
        raise DseError(f"the link check's mpiexec {why}: {' | '.join(tail) or 'no output'}")
    return log.read_text(errors="replace")


def _run_once(
    cmd: list[str], env: dict[str, str], timeout_s: float, cwd: Path, log: Path
) -> int | None:
    """mpiexec's exit status (None: timed out), its output in ``log``."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            cmd, stdout=err, stderr=err, env=env, cwd=cwd, start_new_session=True,
            preexec_fn=die_with_parent(),
        )  # fmt: skip
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            for pid in session_processes(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
    return code


def run_compute(state: State, settings: CheckSettings) -> dict[str, Any]:
    """Per board: the compute probe's times in the board's and its devices' cgroups."""
    out = {}
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    for b in state.spec.boards:
        devices = [d.name for d in state.spec.devices_of(b.name)]
        cmd = [sys.executable, "-m", "dse.cluster.probe", "compute", state.name, b.name]
        cmd += [",".join(devices), str(settings.rounds), str(settings.chunk_ms)]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=settings.timeout_s, check=False
        )
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or [str(proc.returncode)])[-1]
            raise DseError(f"the compute check on board {b.name} failed: {why}")
        out[b.name] = json.loads(proc.stdout)
    return out


def _ratios(num: list[float], den: list[float]) -> float:
    """The median of the round-by-round ratios."""
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def link_summary(spec: ClusterSpec, pair: dict[str, Any], size: int, tolerance: float
                 ) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """One pair of boards: its figures against the configured rate, and its errors."""
    rate = spec.pair_rate_mbit(pair["a"], pair["b"])
    both_rate = rate if spec.network == "shared" else 2 * rate
    one = [size * 8 / t / 1e6 for t in pair["one_way_s"]]
    both = [2 * size * 8 / t / 1e6 for t in pair["exchange_s"]]
    row = {
        "a": pair["a"],
        "b": pair["b"],
        "reps": len(one),
        "configured_mbit": rate,
        "best_mbit": max(one),
        "median_mbit": statistics.median(one),
        "off_pct": 100 * (max(one) / rate - 1),
        "latency_us": 1e6 * statistics.median(pair["latency_s"]),
        "exchange_configured_mbit": both_rate,
        "exchange_best_mbit": max(both),
        "exchange_median_mbit": statistics.median(both),
        "exchange_off_pct": 100 * (max(both) / both_rate - 1),
    }
    link, errors = f"{pair['a']}<->{pair['b']}", []
    if abs(row["off_pct"]) > 100 * tolerance:
        errors.append(
            f"link {link} moved {max(one):.0f} Mbit/s at best, configured {rate:g} "
            f"({row['off_pct']:+.1f} %, more than {100 * tolerance:g} % off)"
        )
    if not exchange_ok(spec.network, rate, max(both), tolerance):
        should = (
            f"one shared medium should give {rate:g}"
            if spec.network == "shared"
            else f"a switched port gives more than {rate:g} (each direction its rate)"
        )
        errors.append(f"link {link} moved {max(both):.0f} Mbit/s both ways at once: {should}")
    return row, errors


def device_summary(spec: ClusterSpec, d: DeviceShare, probe: dict[str, Any]) -> dict[str, Any]:
    """One device: its speed against a whole CPU of its board, and what it got of the CPU."""
    whole = probe["cpu_s"][d.board]  # the kernel's CPU time in the board's cgroup, per round
    mine = probe["wall_s"][d.name]
    speed = _ratios(whole, mine)
    expected = spec.thread_speed(d)
    return {
        "device": d.name,
        "board": d.board,
        "cpus": cpu_list(spec.board(d.board).cpus),
        "share": d.share,
        "memory_mb": d.memory_mb,
        "speed": speed,
        "expected": expected,
        "off_pct": 100 * (speed / expected - 1),
        "spread_pct": 100
        * (_percentile(mine, 0.9) - _percentile(mine, 0.1))
        / statistics.median(mine),
        "cpu_got": _ratios(probe["cpu_s"][d.name], mine),
        "board_free": _ratios(whole, probe["wall_s"][d.board]),
    }


def summarise(
    state: State,
    links: dict[str, Any],
    compute: dict[str, Any],
    settings: CheckSettings,
    platform_links: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Measured against configured, with the errors (links off by more than the tolerance)."""
    spec = state.spec
    rows, errors = [], []
    for pair in links["pairs"]:
        row, errs = link_summary(spec, pair, links.get("size", 0), settings.tolerance)
        rows.append(row)
        errors += errs
    return {
        "cluster": spec.name,
        "platform": spec.platform,
        "network": spec.network,
        "subnet": str(state.subnet),
        "cfs_period_us": spec.cfs_period_us,
        "cpu_share": spec.cpu_share,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "settings": asdict(settings),
        "hosts": links.get("hosts", []),
        "links": rows,
        "devices": [device_summary(spec, d, compute[d.board]) for d in spec.devices],
        "platform_links": platform_links or {},
        "errors": errors,
    }


def check(
    state: State, settings: CheckSettings, platform_links: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Measure the running cluster; the summary (its ``errors`` empty when every link is
    within the tolerance)."""
    system.require()
    with one_run(state):
        links = run_links(state, settings)
        boards = [b.name for b in state.spec.boards]
        if links["pairs"] and sorted(links["hosts"]) != sorted(boards):
            raise DseError(
                f"the link check's ranks ran on hosts {links['hosts']}, not on the boards "
                f"{boards}: the launcher did not put them on their boards"
            )
        compute = run_compute(state, settings)
        again = missed_rate(state.spec, links, settings.tolerance)
        if again:
            links = joined(links, run_links(state, settings))
    return {**summarise(state, links, compute, settings, platform_links), "again": again}


def missed_rate(spec: ClusterSpec, links: dict[str, Any], tolerance: float) -> bool:
    """Whether a link of the check's raw times is off its rate (an error if it stays so)."""
    size = links.get("size", 0)
    return any(link_summary(spec, p, size, tolerance)[1] for p in links["pairs"])


def joined(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two link checks' raw times as one: each pair's repetitions of both, end to end."""
    again = {(p["a"], p["b"]): p for p in second["pairs"]}
    timed = ("latency_s", "one_way_s", "exchange_s")
    pairs = [{**p, **{k: p[k] + again[p["a"], p["b"]][k] for k in timed}} for p in first["pairs"]]
    return {**first, "pairs": pairs}


def _reps(result: dict[str, Any], reps: int) -> str:
    """How many repetitions a link's figures are of: ``reps``, twice that measured again."""
    return (
        f"{2 * reps} (measured again: a link missed its rate)" if result.get("again") else str(reps)
    )


def _link_rows(result: dict[str, Any]) -> list[list[str]]:
    net_link = result.get("platform_links", {}).get("network")
    said = "-"
    if net_link:
        said = f"{net_link['latency_s'] * 1e6:.0f} us, "
        said += f"{net_link['bandwidth_Bps'] * 8 / 1e6:.0f} Mbit/s"
    rows = [["boards", "configured", "measured", "median", "off", "latency", "platform links"]]
    for r in result["links"]:
        mbit = [f"{r[k]:.0f} Mbit/s" for k in ("best_mbit", "median_mbit")]
        rows.append([f"{r['a']} <-> {r['b']}", f"{r['configured_mbit']:g} Mbit/s", *mbit,
                     f"{r['off_pct']:+.1f} %", f"{r['latency_us']:.0f} us", said])  # fmt: skip
        mbit = [f"{r[k]:.0f} Mbit/s" for k in ("exchange_best_mbit", "exchange_median_mbit")]
        rows.append(["  both ways at once", f"{r['exchange_configured_mbit']:g} Mbit/s", *mbit,
                     f"{r['exchange_off_pct']:+.1f} %", "", ""])  # fmt: skip
    return rows


def _device_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = [["device", "board", "cpus", "share", "memory cap", "speed", "expected", "off"]]
    rows[0] += ["spread", "cpu got", "cpu free"]
    for d in result["devices"]:
        flag = "" if abs(d["off_pct"]) <= 100 * DEVICE_TOLERANCE else "  (off)"
        figures = [f"{d[k]:.2f}" for k in ("share",)] + [f"{d['memory_mb']:g} MB"]
        figures += [f"{d[k]:.2f}" for k in ("speed", "expected")]
        figures += [f"{d['off_pct']:+.1f} %{flag}", f"{d['spread_pct']:.0f} %"]
        figures += [f"{d[k]:.2f}" for k in ("cpu_got", "board_free")]
        rows.append([d["device"], d["board"], d["cpus"], *figures])
    return rows


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]  # fmt: skip


def format_check(result: dict[str, Any]) -> str:
    """The self-check as two tables (links, devices) and its verdict."""
    s = result["settings"]
    shares = describe_shares(result.get("cpu_share", "quota"), result["cfs_period_us"])
    lines = [
        f"cluster {result['cluster']} (platform {result['platform']}): {result['network']} "
        f"network, subnet {result['subnet']}, {shares}, checked {result['when']}",
        f"links: MPI over TCP, {s['size_mb']:g} MB messages, best (and median) of "
        f"{_reps(result, s['reps'])}; TCP payload is at most 95.6 % of a rate; no delay is "
        "emulated",
    ]
    lines += _table(_link_rows(result)) if result["links"] else ["  (one board: no link)"]
    lines.append(
        f"devices: a fixed kernel in each device's cgroup against a whole CPU of its board, "
        f"median of {s['rounds']} rounds of {s['chunk_ms']:g} ms"
    )
    lines += _table(_device_rows(result))
    lines += [f"error: {e}" for e in result["errors"]]
    if not result["errors"]:
        lines.append("every link within its tolerance")
    return "\n".join(lines)
