"""CPU shares and memory caps: one cgroup (v1) per board and one per device inside it.

Layout, in each of the ``cpu``, ``cpuset`` and ``memory`` hierarchies::

    dse.<cluster>/                 cpuset: every board's CPUs
      <board>/                     cpuset: the board's CPUs; Open MPI's daemon runs here
        <device>/                  cpu: the device's share; memory: the cap
          corunner/                (cpu_share corunner; cpu and cpuset) the device's co-runners
      rest_cpu<N>/                 (cpu_share corunner; cpu and cpuset) CPU N's unused share

A device's rank joins its cgroups before it runs (the cluster's ``rank`` script), so all of
its memory is charged to its cap and all of its CPU time to its share. A board's cpuset makes
the board look like a machine of that many cores: Open MPI numbers them from 0 (a rankfile's
``slot=0`` on a board holding CPU 1 is CPU 1).

How a device gets its share ``s`` of its board's CPUs is the cluster's ``cpu_share``:

``weight`` (the default)
    The device's cgroup has a CPU weight of its share (``cpu.shares``), and so has its board
    (the sum of its devices'). Where two devices of a CPU compute at once, the kernel divides
    the CPU by their weights; where one computes alone, it may use the whole CPU, so each rank
    of a device of a share is **paced** to the device's speed (:func:`pace_speed`,
    :mod:`dse.runtime.rank.pace`): each onnxruntime run lasts at least its CPU time over ``s``, the
    rank yielding its CPU until then. Every burst then computes at ``s``, as on a slower
    processor, and nothing runs on a CPU while its devices wait: a device that wakes (a message
    came) finds its CPU free unless the other device of the CPU computes.
``corunner``
    While anything runs on a board (what the launcher starts: Open MPI's daemon, a profile;
    and the self-check's probe), every device of share below 1 has co-runners, one per CPU of
    its board: processes that spin, yielding, in the device's ``corunner`` cgroup, whose weight
    is the kernel's least, so the device's own processes take the device's whole part whenever
    they run. The device's cgroup is then always ready to run, and the kernel divides each CPU
    by weights: a board's devices by their shares, boards by the sums of their devices' shares,
    and a CPU's unused share goes to its ``rest_cpu<N>`` group. A device that computes gets
    ``s`` of each CPU from its first scheduler tick on, however long it waited
    before; its ranks are paced as under ``weight``. A device that wakes (a message came) may
    still wait for the other devices' co-runners' time slice before it runs (the launcher runs
    ranks under ``SCHED_BATCH``, which does not preempt: :mod:`dse.cluster.launcher`), where a
    real board answers at once, so a short part takes longer than its share gives
    (``docs/results/cluster.md``). The co-runners leave with the process that started
    them: they poll their parent.
``quota``
    A CFS quota of ``s`` times the board's CPUs per period (``cfs_period_us``). A device runs at
    full speed until its quota for the period is spent, then waits: a burst of work shorter
    than its quota after a wait (a rank that waited for its inputs) runs at a whole CPU's
    speed. ``scripts/cluster_cpu.py`` measures quotas per period (the default's figures:
    ``docs/results/cluster.md``): shorter periods run slower than the share (the kernel
    enforces a quota at its scheduler tick), longer ones pause inferences for longer. The
    kernel refuses quotas under 1 ms.

``scripts/cluster_bursts.py`` measures the three on bursts of work after a wait, and
``docs/results/cluster.md`` compares the model's fidelity under each on edge3_ethernet, each
calibrated on its own cluster ("One run at a time, and both mechanisms on the fixed emulator";
"CPU shares by weights, without co-runners"): co-runners predicted three networks of five
better than quotas, and weights predicted MobileNetV2's mappings on the 0.4 device better than
co-runners, the others as well. So weights are the default.

A device gets its share whatever else the machine runs: the cluster's top cgroup has the
largest CPU weight the kernel takes (``cpu.shares`` :data:`TOP_SHARES`). With the default
weight (1024) the whole cluster weighs as much as one process of the machine, so on a machine
loaded by other work its devices wait, ready to run, for most of an inference with their
shares unspent (``docs/results/cluster.md``). Under quotas and weights
the machine's other work gets every CPU time the devices leave (a pacing rank's yields
excepted); under co-runners it gets a board's CPUs only when nothing runs on the board.

An OOM kill inside a device's cgroup increments ``oom_kill`` in its ``memory.oom_control``:
:func:`oom_kills` reads it, so a run can tell which device ran out of its cap.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dse.cluster.names import CGROUP_ROOT, CONTROLLERS, Names
from dse.cluster.spec import SHARE_SLACK, ClusterSpec, cpu_list
from dse.errors import DseError

MB = 1 << 20
#: The cluster's CPU weight against the machine's other work: the kernel's largest.
TOP_SHARES = 262144
#: A device's co-runners' cgroup (inside the device's), and its weight: the kernel's least.
CORUNNER = "corunner"
CORUNNER_SHARES = 2
#: The hierarchies a co-runner joins, cpuset first (see :data:`dse.cluster.names.CONTROLLERS`);
#: its memory stays where it started: outside the caps.
CORUNNER_CONTROLLERS = ("cpuset", "cpu")
#: A co-runner (``python -S -c CORUNNER_PROGRAM PARENT GROUP...``): it joins the cgroup
#: directories given, then spins, yielding, until the process that started it is gone. (It
#: yields: a CPU that spins without yielding holds back the network's receive work there.)
CORUNNER_PROGRAM = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "for group in sys.argv[2:]:\n"
    '    with open(group + "/cgroup.procs", "w") as f:\n'
    "        f.write(str(os.getpid()))\n"
    "while os.getppid() == parent:\n"
    "    os.sched_yield()\n"
)

#: The scheduling policy the launcher gives everything it puts on a board (``chrt``'s flag; None:
#: the default, SCHED_OTHER), per ``cpu_share``. Under ``SCHED_BATCH`` a process that wakes does
#: not preempt the one running: a rank that polls for a message (:mod:`dse.runtime.rank.waits`)
#: no longer interrupts its board's other device at each poll, and
#: sees its message a little later (``scripts/cluster_neighbour.py``, "Waiting ranks that do
#: not preempt" in ``docs/results/cluster.md``). It paid under co-runners, and weights keep it
#: (not measured against the default policy under weights); under quotas a device that waited
#: runs ahead at full speed, and the later wake-ups cost more than they save.
RANK_POLICY: dict[str, str | None] = {"quota": None, "corunner": "-b", "weight": "-b"}


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
        if spec.weighted:  # boards sharing a CPU divide it by their devices' shares
            total = sum(d.share for d in spec.devices_of(board.name))
            _write(names.cgroup("cpu", board.name) / "cpu.shares", str(device_shares(total)))
        for d in spec.devices_of(board.name):
            for controller in CONTROLLERS:
                make_group(controller, names.cgroup(controller, board.name, d.name))
            cpuset = names.cgroup("cpuset", board.name, d.name)
            _write(cpuset / "cpuset.cpus", cpu_list(board.cpus))
            _write(cpuset / "cpuset.mems", mems)
            cpu = names.cgroup("cpu", board.name, d.name)
            if not spec.weighted:
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
    for board in spec.boards:
        for group in corunner_groups(spec, board.name):
            for controller in CORUNNER_CONTROLLERS:
                make_group(controller, names.cgroup(controller, *group.parts))
            _write(names.cgroup("cpu", *group.parts) / "cpu.shares", str(group.weight))
            _write(names.cgroup("cpuset", *group.parts) / "cpuset.cpus", cpu_list(group.cpus))
            _write(names.cgroup("cpuset", *group.parts) / "cpuset.mems", mems)


def apply_shares(spec: ClusterSpec, names: Names) -> None:
    """Give a running cluster's cgroups ``spec``'s shares, as :func:`build` made them: each
    device's CPU weight (and CFS quota under ``quota``), each board's weight (the sum of its
    devices'), each CPU's rest group's (``corunner``). The co-runner groups themselves must be
    those :func:`build` made (:func:`corunner_groups` of the spec ``up`` built)."""
    for board in spec.boards:
        if spec.weighted:
            total = sum(d.share for d in spec.devices_of(board.name))
            _write(names.cgroup("cpu", board.name) / "cpu.shares", str(device_shares(total)))
        for d in spec.devices_of(board.name):
            cpu = names.cgroup("cpu", board.name, d.name)
            if not spec.weighted:
                _write(cpu / "cpu.cfs_quota_us", str(spec.quota_us(d)))
            _write(cpu / "cpu.shares", str(device_shares(d.share)))
        for group in corunner_groups(spec, board.name):
            _write(names.cgroup("cpu", *group.parts) / "cpu.shares", str(group.weight))


def rest_group(cpu: int) -> str:
    """The top-level cgroup of CPU ``cpu``'s unused share (not a board's name: those have no
    '_')."""
    return f"rest_cpu{cpu}"


def pace_speed(spec: ClusterSpec, device: str) -> float | None:
    """Under ``cpu_share`` weight and corunner, the speed in CPUs a rank on ``device`` is paced
    to (:data:`dse.runtime.rank.pace.PACE_ENV`: its share of its board's CPUs), or None for a
    device of a whole share. Under quotas a rank is not paced: yielding would spend its quota."""
    d = spec.device(device)
    if not spec.weighted or d.share >= 1.0 - SHARE_SLACK:
        return None
    return d.share * len(spec.board(d.board).cpus)


def cpu_use(spec: ClusterSpec) -> dict[int, float]:
    """Per CPU of the cluster, the shares its devices (of every board holding it) ask for."""
    use: dict[int, float] = {}
    for b in spec.boards:
        for c in b.cpus:
            use[c] = use.get(c, 0.0) + sum(d.share for d in spec.devices_of(b.name))
    return use


@dataclass(frozen=True)
class CoGroup:
    """A cgroup of co-runners: its path parts under the cluster's top, CPU weight and CPUs,
    and how many co-runners it gets (one per CPU)."""

    parts: tuple[str, ...]
    weight: int
    cpus: tuple[int, ...]


def corunner_groups(spec: ClusterSpec, board: str) -> list[CoGroup]:
    """Under ``cpu_share`` corunner, where co-runners keep the board's CPUs busy while
    something runs on it: every device of share below 1 (its ``corunner`` cgroup, on the
    board's CPUs) and the rest group of each of the board's CPUs whose devices ask for less
    than all of it."""
    if spec.cpu_share != "corunner":
        return []
    b = spec.board(board)
    found = [
        CoGroup((board, d.name, CORUNNER), CORUNNER_SHARES, b.cpus)
        for d in spec.devices_of(board)
        if d.share < 1.0 - SHARE_SLACK
    ]
    use = cpu_use(spec)
    found += [
        CoGroup((rest_group(c),), device_shares(1.0 - use[c]), (c,))
        for c in b.cpus
        if use[c] < 1.0 - SHARE_SLACK
    ]
    return found


def corunner_dirs(names: Names, parts: tuple[str, ...]) -> list[str]:
    """The cgroup directories a co-runner of the group ``parts`` joins, in order."""
    return [str(names.cgroup(c, *parts)) for c in CORUNNER_CONTROLLERS]


def start_corunners(
    spec: ClusterSpec, names: Names, board: str, timeout_s: float = 10.0
) -> list[subprocess.Popen]:
    """Start the board's co-runners as children of this process (they end when it does; the
    caller may stop them sooner); return once each has joined its cgroups."""
    procs = []
    groups = corunner_groups(spec, board)
    for group in groups:
        argv = [sys.executable, "-S", "-c", CORUNNER_PROGRAM, str(os.getpid())]
        argv += corunner_dirs(names, group.parts)
        for _ in group.cpus:
            quiet = subprocess.DEVNULL
            procs.append(subprocess.Popen(argv, stdin=quiet, stdout=quiet, stderr=quiet))
    last = [Path(corunner_dirs(names, g.parts)[-1]) for g in groups]
    deadline = time.monotonic() + timeout_s
    while not {p.pid for p in procs} <= {pid for g in last for pid in tasks(g)}:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            raise DseError(f"the co-runners of board {board} did not join their cgroups")
        time.sleep(0.005)
    return procs


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


def kill_tasks(
    names: Names, spare: frozenset[int] | set[int] = frozenset(), board: str | None = None
) -> None:
    """SIGKILL every process in the cluster's cgroups (or ``board``'s) but those of ``spare``."""
    tops = [names.cgroup(c, board) for c in CONTROLLERS] if board is not None else []
    for group in groups(names):
        if tops and not any(group.is_relative_to(top) for top in tops):
            continue
        for pid in tasks(group):
            if pid in spare:
                continue
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
