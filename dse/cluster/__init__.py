"""An emulated edge cluster on one machine: boards, shaped links, CPU shares, memory caps.

``python -m dse.cluster up|status|down platform=NAME`` builds, shows and removes it from the
platform's ``emulation:`` section. The library, for the runtime and the tests:

* :func:`parse_spec` (a platform config -> :class:`ClusterSpec`), :func:`up`, :func:`down`,
  :func:`load` (the :class:`State` of a running cluster), :func:`leftovers`, :func:`clusters`;
* MPI across the boards: :func:`mpiexec_options` (extra arguments and environment),
  :func:`write_mpi_files` (hostfile and rankfile naming the boards), :func:`rank_prefix`
  (each rank into its device's cgroups), :func:`command` (all of it);
* the runtime on the cluster: :func:`launcher_for` (a platform config -> the runtime's
  :class:`~dse.runtime.launch.mpiexec.Launcher`: on the platform's running cluster, or on its hosts
  by name without ``emulation:``), :func:`cluster_launcher` (of a running cluster);
* :func:`oom_kills` (whether a device's cgroup saw an OOM kill), :func:`peak_memory_mb` (the
  most memory charged to a device's cgroup), :func:`stop_processes` (kill whatever still runs
  on the boards after a failed run), :func:`set_link` (cut a board's link), :func:`check`
  (the self-check);
* while ranks run: :func:`set_rate` (a port's or the medium's rate), :func:`set_share` (a
  device's CPU share), :mod:`dse.cluster.live`.
"""

from __future__ import annotations

from dse.cluster.build import (
    clusters,
    down,
    leftovers,
    link_carrying,
    set_link,
    stop_processes,
    up,
)
from dse.cluster.check import CheckSettings, check, format_check
from dse.cluster.cpu import oom_kills as _oom_kills
from dse.cluster.cpu import peak_memory_mb as _peak_memory_mb
from dse.cluster.live import set_rate, set_share
from dse.cluster.mpi import MpiFiles, command, mpiexec_options, rank_prefix, write_mpi_files
from dse.cluster.runs import RunWatch, cluster_launcher, launcher_for
from dse.cluster.spec import ClusterSpec, parse_spec
from dse.cluster.state import State, load
from dse.cluster.system import missing

__all__ = [
    "CheckSettings",
    "ClusterSpec",
    "MpiFiles",
    "RunWatch",
    "State",
    "check",
    "cluster_launcher",
    "clusters",
    "command",
    "down",
    "format_check",
    "launcher_for",
    "leftovers",
    "link_carrying",
    "load",
    "missing",
    "mpiexec_options",
    "oom_kills",
    "parse_spec",
    "peak_memory_mb",
    "rank_prefix",
    "set_link",
    "set_rate",
    "set_share",
    "stop_processes",
    "up",
    "write_mpi_files",
]


def oom_kills(state: State, device: str) -> int:
    """How many processes the OOM killer has killed in ``device``'s cgroup since ``up``: read
    it before and after a run; a larger count means the device ran out of its memory cap."""
    return _oom_kills(state.names, state.spec.device(device).board, device)


def peak_memory_mb(state: State, device: str, reset: bool = False) -> float:
    """The most memory charged to ``device``'s cgroup (MiB) since ``up`` or the last reset."""
    return _peak_memory_mb(state.names, state.spec.device(device).board, device, reset)
