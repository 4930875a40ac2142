"""CPU shares and memory caps: one cgroup (v1) per board and one per device inside it.

Layout, in each of the ``cpu``, ``cpuset`` and ``memory`` hierarchies::

    dse.<cluster>/                 cpuset: every board's CPUs
      <board>/                     cpuset: the board's CPUs; Open MPI's daemon runs here
        <device>/                  cpu: CFS quota share x CPUs x period; memory: the cap

A device's rank joins its cgroups before it runs (the cluster's ``rank`` script), so all of
its memory is charged to its cap and all of its CPU time to its quota. A board's cpuset makes
the board look like a machine of that many cores: Open MPI numbers them from 0 (a rankfile's
``slot=0`` on a board holding CPU 1 is CPU 1).

A CFS quota gives a device its share on average: within a period the device runs at full speed
until its quota is spent, then waits. ``benchmarks/cluster_cpu.py`` measures it per period: at the
default 10 ms a 35 ms inference took its share's time within 3 % (spread 12-16 % alone, against
15 % for a whole CPU on that loaded machine); shorter periods ran slower than the share (the
kernel enforces a quota at its 4 ms tick), longer ones paused inferences for longer. The kernel
refuses quotas under 1 ms.

A device gets its share whatever else the machine runs: the cluster's top cgroup has the
largest CPU weight the kernel takes (``cpu.shares`` :data:`TOP_SHARES`). With the default
weight (1024) the whole cluster weighed as much as one process of the machine: on a machine
loaded by other work (load 4.5 on 2 cores) edge3_ethernet's edge1 devices were ready to run
but not running 136-190 ms of each 163-271 ms MobileNetV2 inference, with their quotas hardly
ever spent; at the largest weight the same deployment took 36-44 ms. The quotas keep the
devices to their shares, so the machine's other work still gets every CPU time they leave.
Within a board, each device's weight follows its share (two devices ready at once progress
at the pace of their shares until one's quota is spent).

An OOM kill inside a device's cgroup increments ``oom_kill`` in its ``memory.oom_control``:
:func:`oom_kills` reads it, so a run can tell which device ran out of its cap.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from pathlib import Path

from dse.cluster.names import CGROUP_ROOT, CONTROLLERS, Names
from dse.cluster.spec import ClusterSpec, cpu_list
from dse.errors import DseError

MB = 1 << 20
#: The cluster's CPU weight against the machine's other work: the kernel's largest.
TOP_SHARES = 262144


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise DseError(f"cannot write {value!r} to {path}: {exc.strerror}") from None


def root_mems() -> str:
    """The memory nodes of the root cpuset (a cpuset needs some before it takes a task)."""
    return (CGROUP_ROOT / "cpuset" / "cpuset.mems").read_text().strip()


def make_group(controller: str, path: Path) -> None:
    try:
        path.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        raise DseError(f"cannot make the {controller} cgroup {path}: {exc.strerror}") from None


def build(spec: ClusterSpec, names: Names) -> None:
    """Make the cluster's cgroups (the caller removes them on failure)."""
    mems = root_mems()
    every_cpu = sorted({c for b in spec.boards for c in b.cpus})
    for controller in CONTROLLERS:
        make_group(controller, names.cgroup(controller))
    _write(names.cgroup("cpu") / "cpu.shares", str(TOP_SHARES))
    _write(names.cgroup("cpuset") / "cpuset.cpus", cpu_list(every_cpu))
    _write(names.cgroup("cpuset") / "cpuset.mems", mems)
    for board in spec.boards:
        for controller in CONTROLLERS:
            make_group(controller, names.cgroup(controller, board.name))
        _write(names.cgroup("cpuset", board.name) / "cpuset.cpus", cpu_list(board.cpus))
        _write(names.cgroup("cpuset", board.name) / "cpuset.mems", mems)
        for d in spec.devices_of(board.name):
            for controller in CONTROLLERS:
                make_group(controller, names.cgroup(controller, board.name, d.name))
            cpuset = names.cgroup("cpuset", board.name, d.name)
            _write(cpuset / "cpuset.cpus", cpu_list(board.cpus))
            _write(cpuset / "cpuset.mems", mems)
            cpu = names.cgroup("cpu", board.name, d.name)
            _write(cpu / "cpu.cfs_period_us", str(spec.cfs_period_us))
            _write(cpu / "cpu.cfs_quota_us", str(spec.quota_us(d)))
            _write(cpu / "cpu.shares", str(device_shares(d.share)))
            memory = names.cgroup("memory", board.name, d.name)
            cap = str(int(d.memory_mb * MB))
            _write(memory / "memory.limit_in_bytes", cap)
            memsw = memory / "memory.memsw.limit_in_bytes"
            if memsw.is_file():  # with swap accounting: no swapping past the cap either
                with contextlib.suppress(OSError):
                    memsw.write_text(cap)


def device_shares(share: float) -> int:
    """A device's CPU weight among its board's devices: its share of 1024 (at least 2, the
    kernel's least)."""
    return max(round(1024 * share), 2)


def groups(names: Names) -> list[Path]:
    """Every cgroup directory of the cluster, deepest first."""
    found = []
    for controller in CONTROLLERS:
        top = names.cgroup(controller)
        if top.is_dir():
            found += [p for p in top.rglob("*") if p.is_dir()] + [top]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def tasks(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_tasks(names: Names) -> None:
    """SIGKILL every process in the cluster's cgroups."""
    for group in groups(names):
        for pid in tasks(group):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def teardown(names: Names, timeout_s: float = 10.0) -> None:
    """Kill what runs in the cluster's cgroups (only its launcher puts anything there) and
    remove them, deepest first."""
    deadline = time.monotonic() + timeout_s
    for group in groups(names):
        while True:
            for pid in tasks(group):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise DseError(f"cannot remove the cgroup {group}: {exc.strerror}") from None
                time.sleep(0.02)


def oom_kills(names: Names, board: str, device: str) -> int:
    """How many processes the OOM killer has killed in the device's cgroup since it was made
    (compare the count before and after a run)."""
    path = names.cgroup("memory", board, device) / "memory.oom_control"
    try:
        fields = dict(line.split() for line in path.read_text().splitlines())
    except OSError as exc:
        raise DseError(f"cannot read {path}: {exc.strerror} (is the cluster up?)") from None
    if "oom_kill" not in fields:
        raise DseError(f"{path} has no oom_kill count: this kernel is older than 4.13")
    return int(fields["oom_kill"])


def peak_memory_mb(names: Names, board: str, device: str, reset: bool = False) -> float:
    """The most memory charged to the device's cgroup (MiB) since it was made or last reset;
    with ``reset``, start counting again. Unlike a process's peak RSS it leaves out file pages
    other cgroups brought into the page cache (a deployment's weight files, read by whoever
    wrote them): those are not charged here, and the cap does not hold them either."""
    path = names.cgroup("memory", board, device) / "memory.max_usage_in_bytes"
    peak = int(path.read_text()) / MB
    if reset:
        _write(path, "0")
    return peak


def join(pid: int, names: Names, *parts: str) -> None:
    """Move ``pid`` into the cgroups ``dse.<cluster>/<parts...>`` of every controller."""
    for controller in CONTROLLERS:
        _write(names.cgroup(controller, *parts) / "cgroup.procs", str(pid))
