"""The runtime's launcher for a platform: on its hosts by name, or on its emulated cluster.

:func:`launcher_for` is where a platform config becomes the runtime's
:class:`~dse.runtime.launch.mpiexec.Launcher`, for every workflow that launches ranks
(``dse.deploy``, phase two, ``dse.calibrate``, ``dse.fidelity``):

* a platform without ``emulation:`` runs on its hosts by name (:func:`hosts_launcher`):
  mpiexec reaches hosts other than this one over ssh, and each run ships the deployment to
  them first unless they share this machine's disk (``reach:`` in the platform file);
* a platform with it runs on its cluster, which must be up (:func:`cluster_launcher`): every
  run ships the deployment to the boards' own disks, Open MPI reaches the boards by ssh
  (:mod:`dse.cluster.hosts`, :mod:`dse.cluster.mpi`), its daemons and ranks talk
  over the cluster's subnet only (between boards TCP over the shaped links; within a board
  shared memory: Open MPI tells them apart by the boards' host names), each rank is bound to its
  board's CPUs and enters its device's cgroups (the cluster's ``rank`` script as the rank
  wrapper), and :class:`RunWatch` names the cause of a failed run (a device's OOM kill, a cut
  link) and leaves nothing of it on the boards.

It lives in the cluster layer, above the runtime: the runtime knows no emulation (a real
cluster is the same Launcher with ssh), and only the cluster knows its state, scripts and
subnet.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

from dse.cluster.build import link_carrying, local_names, stop_processes
from dse.cluster.cpu import oom_kills
from dse.cluster.hosts import ssh_command
from dse.cluster.mpi import board_slot, mpiexec_options
from dse.cluster.names import Names
from dse.cluster.net import namespaces
from dse.cluster.spec import ClusterSpec, parse_spec
from dse.cluster.state import STATE, State, load, one_run
from dse.errors import DseError
from dse.platform import read_platform, resolve
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.launch.mpiexec import Finish, Launcher, Placement
from dse.runtime.launch.ship import Remote


def launcher_for(
    platform_cfg: Mapping[str, Any], required: bool = True, given: str | None = None
) -> Launcher:
    """How ranks start on the platform ``platform_cfg`` (``conf/platform/NAME.yaml`` as a
    mapping): without ``emulation:``, on its hosts by name (:func:`hosts_launcher`); with it,
    the running cluster named after the platform (:func:`cluster_launcher`), or one line saying
    how to bring it up (without ``required``: on its hosts by name while it is not up, for a
    deployment that is only written). ``given``: the platform's words on the command line, for
    that line (default ``platform=NAME``)."""
    if not platform_cfg.get("emulation"):
        return hosts_launcher(platform_cfg)
    name = str(platform_cfg.get("name"))
    given = given or f"platform={name}"
    if not (Names(name).state_dir / STATE).is_file():
        if not required:
            return hosts_launcher(platform_cfg)
        raise DseError(f"cluster '{name}' is not up: run python -m dse.cluster up {given}")
    state = load(name)
    expected = parse_spec(
        platform_cfg, name, state.spec.cfs_period_us, cpu_share=state.spec.cpu_share
    )
    if expected != state.as_built:  # rates and shares set live since are its own
        raise DseError(
            f"cluster '{name}' runs another version of its platform "
            f"({difference(expected, state.as_built)}): run python -m dse.cluster up {given} again"
        )
    present = set(namespaces())
    gone = [b.name for b in state.spec.boards if state.names.board_ns(b.name) not in present]
    if gone:
        raise DseError(
            f"cluster '{name}' is broken: boards {', '.join(gone)} are gone: run python -m "
            f"dse.cluster down {given}, then up"
        )
    return cluster_launcher(state)


def hosts_launcher(platform_cfg: Mapping[str, Any]) -> Launcher:
    """Ranks on the platform's hosts by name: ``Launcher()`` where every host is this machine
    or sees its disk (``reach.shared_disk``); else each run ships the deployment to the hosts
    as ``reach:`` says (:class:`dse.platform.Reach`)."""
    file = read_platform(platform_cfg)
    hosts = {d.host for d in resolve(file).devices}
    if file.reach.shared_disk or hosts <= local_names():
        return Launcher()
    if not file.reach.area.startswith("/"):
        raise DseError(
            f"platform '{file.name}': reach.area={file.reach.area} is not an absolute path: "
            "name the folder from / (e.g. /var/tmp/dse)"
        )
    ssh = tuple(shlex.split(file.reach.ssh))
    if not ssh:
        raise DseError(f"platform '{file.name}': reach.ssh is empty: give the ssh command")
    return Launcher(remote=Remote(ssh=ssh, area=file.reach.area))


def difference(here: ClusterSpec, running: ClusterSpec) -> str:
    """The first field in which the platform's cluster and the running one differ."""
    for f in fields(ClusterSpec):
        a, b = getattr(here, f.name), getattr(running, f.name)
        if a != b:
            if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
                a, b = next((x, y) for x, y in zip(a, b, strict=True) if x != y)
            return f"{f.name}: {a} in the platform, {b} running"
    return "no difference"


def cluster_launcher(state: State) -> Launcher:
    """The runtime's launcher on the running cluster ``state``."""
    args, env = mpiexec_options(state)
    return Launcher(
        args=tuple(args),
        env=env,
        slots={b.name: board_slot(state, b.name) for b in state.spec.boards},
        rank_wrapper=str(state.rank_script),
        watch=RunWatch(state),
        local_cores={b.name: frozenset(b.cpus) for b in state.spec.boards},
        remote=Remote(ssh=ssh_command(state.names)),
        head=str(state.head),
    )


@dataclass(frozen=True)
class RunWatch:
    """Around each run on the cluster (:data:`dse.runtime.launch.mpiexec.Watch`).

    A cluster runs one run at a time (:func:`dse.cluster.state.one_run`): from before
    mpiexec starts until its processes are gone, so a failed run's cleanup, which kills every
    process on the boards, kills none of another run's.

    Before the run: one line if a board it uses has its link down (the run would wait for its
    time limit), and the OOM-kill count of every device it uses. After a failed run: kills every
    process on the cluster's boards (Open MPI's daemons there outlive mpiexec's session) and
    puts the failure's cause before its reason: a device whose cgroup OOM-killed a process
    during the run, a board it uses whose link is down."""

    state: State

    @contextmanager
    def __call__(self, placement: Placement) -> Iterator[Finish]:
        pairs = list(dict.fromkeys(placement))  # (board, device), each once
        boards = list(dict.fromkeys(board for board, _ in pairs))
        with one_run(self.state):
            for b in boards:
                if not link_carrying(self.state, b):
                    raise DseError(
                        f"cluster '{self.state.name}': board {b}'s link is down, so a run there "
                        "cannot finish: restore it (dse.cluster.set_link) or bring the cluster "
                        "up again"
                    )
            names = self.state.names
            before = {pair: oom_kills(names, *pair) for pair in pairs}

            def finish(result: Measurement) -> Measurement:
                if result.status == "ok":
                    return result
                stop_processes(self.state)
                causes = [
                    f"{d} on board {b} ran out of its "
                    f"{self.state.spec.device(d).memory_mb:g} MB memory cap (OOM kill)"
                    for (b, d), count in before.items()
                    if oom_kills(names, b, d) > count
                ]
                causes += [
                    f"board {b}'s link is down" for b in boards if not link_carrying(self.state, b)
                ]
                if not causes:
                    return result
                return replace(result, reason="; ".join([*causes, str(result.reason or "")]))

            yield finish
