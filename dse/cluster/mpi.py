"""What mpiexec needs to run ranks on an emulated cluster's boards, as on real hosts.

The runtime's command for a real cluster is ``mpiexec --hostfile H --map-by rankfile:file=R
PROGRAM`` with ssh reaching the boards. For an emulated cluster three things change, and
nothing else:

* :func:`mpiexec_options`: Open MPI reaches the boards by ssh with the cluster's config (its
  key and known hosts, :mod:`dse.cluster.hosts`; through the cluster's launcher where co-runners
  must start with the run), and its daemons (``oob``) and ranks (``btl tcp``) talk over the
  cluster's subnet only; ranks blocked in a receive yield their core (a spinning rank
  starves the veth's receive work: every small message then waits a scheduler tick), and the
  runtime's ranks poll then sleep while they wait (:data:`WAIT_US`);
* :func:`write_mpi_files`: the hostfile and rankfile name the boards; a rank's slot is its
  board's CPUs as the board sees them (numbered from 0, as on a real board of that many cores);
* :func:`rank_prefix`: put before the program, it moves each rank into its device's cgroups
  (CPU share and memory cap) before the program starts.

Ranks of one board talk through shared memory, ranks of two boards through TCP over the
shaped links: Open MPI decides that from the host names, which the launcher makes differ.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dse.cluster.hosts import ssh_command
from dse.cluster.state import State
from dse.errors import DseError
from dse.runtime.launch.mpiexec import MPI_ENV, ROOT_ENV

#: A rank that waits polls for 50 us, then sleeps between polls (:mod:`dse.runtime.rank.waits`): a
#: device is a CPU share and a board's devices share its CPUs, so a rank spinning while it
#: waits burns its device's share and holds the core its board's other device needs
#: (``docs/results/cluster.md``). Set DSE_WAIT_SPIN_US before the command to choose another
#: (``spin``: MPI's blocking calls).
WAIT_US = "50"


def mpiexec_options(state: State) -> tuple[list[str], dict[str, str]]:
    """mpiexec's extra arguments for the cluster, and the environment to run it with."""
    subnet = str(state.subnet)
    if state.spec.cpu_share == "corunner":  # the board's co-runners start with the run
        reach = [("--prtemca", "plm_ssh_agent", str(state.launcher))]
    else:
        reach = [("--prtemca", "plm_ssh_args", shlex.join(ssh_command(state.names)[1:]))]
    options = [
        *reach,
        # mpiexec reaches every board itself: a board's daemon does not ssh to others (real
        # boards need not hold each other's keys)
        ("--prtemca", "plm_ssh_no_tree_spawn", "1"),
        ("--prtemca", "oob_tcp_if_include", subnet),
        ("--mca", "btl_tcp_if_include", subnet),
    ]
    args = [word for option in options for word in option]
    wait = {"DSE_WAIT_SPIN_US": os.environ.get("DSE_WAIT_SPIN_US", WAIT_US)}
    # MPI_ENV: a rank blocked in a receive yields its core (a small message between boards
    # then arrives without waiting for a scheduler tick), and a message between boards moves
    # while its sender computes; ROOT_ENV: Open MPI refuses root without it
    env = {**MPI_ENV, **wait, **(ROOT_ENV if os.geteuid() == 0 else {})}
    return args, env


@dataclass(frozen=True)
class MpiFiles:
    hostfile: Path
    rankfile: Path

    def args(self) -> list[str]:
        """mpiexec's ``--hostfile`` and ``--map-by`` for these files (ranks of a board may share
        its CPUs, each at its own share: oversubscribing a slot is allowed)."""
        return [
            "--hostfile",
            str(self.hostfile),
            "--map-by",
            f"rankfile:file={self.rankfile}:oversubscribe",
        ]


def _board_of(state: State, device: str) -> str:
    try:
        return state.spec.device(device).board
    except KeyError:
        names = ", ".join(d.name for d in state.spec.devices)
        raise DseError(
            f"cluster {state.name} has no device '{device}' (its devices: {names})"
        ) from None


def _write(state: State, boards: Sequence[str], directory: Path) -> MpiFiles:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for b in boards:
        counts[b] = counts.get(b, 0) + 1
    hostfile = directory / "hostfile"
    hostfile.write_text("".join(f"{b} slots={n}\n" for b, n in counts.items()))
    lines = [f"rank {rank}={b} slot={board_slot(state, b)}\n" for rank, b in enumerate(boards)]
    rankfile = directory / "rankfile"
    rankfile.write_text("".join(lines))
    return MpiFiles(hostfile, rankfile)


def board_slot(state: State, board: str) -> str:
    """The cores a rank of ``board`` is bound to, as the board numbers them: all of its CPUs
    (its devices share them, each at its own CPU share)."""
    n = len(state.spec.board(board).cpus)
    return "0" if n == 1 else f"0-{n - 1}"


def write_mpi_files(state: State, devices: Sequence[str], directory: Path) -> MpiFiles:
    """A hostfile and a rankfile in ``directory`` for one rank per device, in rank order."""
    return _write(state, [_board_of(state, d) for d in devices], directory)


def board_files(state: State, boards: Sequence[str], directory: Path) -> MpiFiles:
    """A hostfile and a rankfile for one rank per board (the self-check's link probes)."""
    for b in boards:
        try:
            state.spec.board(b)
        except KeyError:
            raise DseError(f"cluster {state.name} has no board '{b}'") from None
    return _write(state, list(boards), directory)


def rank_prefix(state: State, devices: Sequence[str]) -> list[str]:
    """What goes before the program on mpiexec's command line so that rank ``r`` runs in the
    cgroups of ``devices[r]``."""
    targets = [f"{_board_of(state, d)}/{d}" for d in devices]
    return [str(state.rank_script), ",".join(targets)]


def command(
    state: State,
    devices: Sequence[str],
    directory: Path,
    program: Sequence[str],
    mpiexec: str = "mpiexec",
) -> tuple[list[str], dict[str, str]]:
    """The whole mpiexec command running ``program`` as one rank per device (in rank order) on
    the cluster, and the environment to add; the hostfile and rankfile go to ``directory``."""
    args, env = mpiexec_options(state)
    files = write_mpi_files(state, devices, directory)
    cmd = [mpiexec, *args, "-n", str(len(devices)), *files.args()]
    return [*cmd, *rank_prefix(state, devices), *program], env
