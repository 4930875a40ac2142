"""`up` and `down`: build a cluster in an order that can always be undone, and undo it.

``up`` first removes whatever a cluster of the same name left (a killed run), then makes the
launcher, the network, the cgroups, waits until every board's link carries traffic, boots every
board (its own disk and sshd, :mod:`dse.cluster.hosts`), and writes the state last. Any
failure on the way tears down everything of the cluster's name before the error goes on, so
nothing is left half built. ``down`` finds everything by name alone.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
from pathlib import Path

from dse.cluster import cpu, hosts, launcher, net, system
from dse.cluster.names import BOARD_IF, CGROUP_ROOT, CONTROLLERS, PREFIX, STATE_ROOT, Names
from dse.cluster.spec import ClusterSpec
from dse.cluster.state import State, machine_lock, save
from dse.cluster.system import ip
from dse.errors import DseError

HOSTS = Path("/etc/hosts")


def local_names() -> set[str]:
    """Names Open MPI would take for this machine (it runs a rank of such a host here, not
    through the launcher): its host name, and /etc/hosts names of loopback or own addresses."""
    own = {"127.0.0.1", "::1"}
    with contextlib.suppress(OSError):
        own |= {str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None)}
    found = {"localhost", socket.gethostname(), socket.gethostname().split(".")[0]}
    with contextlib.suppress(OSError):
        for line in HOSTS.read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) >= 2:
                with contextlib.suppress(ValueError):
                    if fields[0] in own or ipaddress.ip_address(fields[0]).is_loopback:
                        found.update(fields[1:])
    return found


def check_board_names(spec: ClusterSpec) -> None:
    local = local_names()
    for b in spec.boards:
        if b.name in local:
            raise DseError(
                f"platform '{spec.platform}': host '{b.name}' is a name of this machine, so "
                "mpiexec would run its ranks here instead of on the emulated board: rename it"
            )


def up(spec: ClusterSpec) -> State:
    """Build the cluster ``spec`` (after removing any cluster of its name); its state."""
    system.require()
    check_board_names(spec)
    names = Names(spec.name)
    with machine_lock():
        teardown(names)
        try:
            subnet = net.choose_subnet(names)
            launcher.write(names, spec)
            net.build(spec, names, subnet)
            cpu.build(spec, names)
            net.wait_ready(spec, names, subnet)
            state = State(spec, subnet)
            hosts.start(state)
            save(state)
        except BaseException as exc:
            try:
                teardown(names)
            except DseError as cleanup:  # both: why up failed, and what is left
                raise DseError(f"{exc}; then {cleanup}") from None
            raise
    return state


def teardown(names: Names) -> None:
    """Remove everything of the cluster's name that exists; every step is tried."""
    errors = []
    for step in (net.teardown, cpu.teardown):
        try:
            step(names)
        except DseError as exc:
            errors.append(str(exc))
    shutil.rmtree(names.state_dir, ignore_errors=True)
    if errors:
        raise DseError(f"cluster {names.cluster} is not fully removed: {'; '.join(errors)}")


def down(name: str) -> bool:
    """Remove the cluster ``name``; whether anything of it existed."""
    system.require()
    names = Names(name)
    with machine_lock():
        existed = bool(leftovers(name))
        teardown(names)
    left = leftovers(name)
    if left:
        raise DseError(f"cluster {name} is not fully removed: {', '.join(left)} remain")
    return existed


def stop_processes(state: State) -> None:
    """Kill every process running on the cluster's boards (in their namespaces or cgroups)
    but their sshd: after a run that timed out or failed. Open MPI's daemons on the boards
    leave mpiexec's session (a second daemon calls setsid): killing the session alone leaves
    them running a while before they notice and exit with their ranks."""
    spare = hosts.listeners(state.names, [b.name for b in state.spec.boards])
    for b in state.spec.boards:
        net.kill_in(state.names.board_ns(b.name), spare)
    cpu.kill_tasks(state.names, spare)


def reboot(state: State, board: str) -> None:
    """Boot a board again, as a real board that restarts: every process on it ends (its sshd
    too), its disk is gone with them, and it boots with an empty one (:mod:`dse.cluster.hosts`)."""
    state.spec.board(board)  # KeyError for an unknown board
    net.kill_in(state.names.board_ns(board))
    cpu.kill_tasks(state.names, board=board)
    hosts.wait_listening(state, board, hosts.boot(state.spec, state.names, board))


def set_link(state: State, board: str, carrying: bool) -> None:
    """Cut a board's link (``ip link set eth0 down``), or restore it."""
    state.spec.board(board)  # KeyError for an unknown board
    ip("link", "set", BOARD_IF, "up" if carrying else "down", ns=state.names.board_ns(board))


def link_carrying(state: State, board: str) -> bool:
    """Whether a board's link is up (not cut by :func:`set_link`, its namespace still there)."""
    state.spec.board(board)  # KeyError for an unknown board
    proc = ip("-j", "link", "show", BOARD_IF, ns=state.names.board_ns(board), check=False)
    try:
        (link,) = json.loads(proc.stdout) if proc.returncode == 0 else [{}]
    except ValueError:
        return False
    return "UP" in link.get("flags", [])


def leftovers(name: str) -> list[str]:
    """What of the cluster ``name`` exists on this machine (namespaces, links, cgroups, its
    state directory); empty once it is down."""
    names = Names(name)
    found = net.leftovers(names)
    found += [f"cgroup {p}" for p in cpu.groups(names)]
    if names.state_dir.exists():
        found.append(f"directory {names.state_dir}")
    return found


def clusters() -> list[str]:
    """Names of the clusters of which anything exists on this machine (up, or left behind)."""
    found = set()
    for ns in net.namespaces():
        if ns.startswith(PREFIX):
            found.add(ns[len(PREFIX) :].split(".")[0])
    for controller in CONTROLLERS:
        top = CGROUP_ROOT / controller
        if top.is_dir():
            found |= {p.name[len(PREFIX) :] for p in top.glob(f"{PREFIX}*") if p.is_dir()}
    if STATE_ROOT.is_dir():
        found |= {p.name for p in STATE_ROOT.iterdir() if p.is_dir()}
    return sorted(found)
