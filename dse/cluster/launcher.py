"""The launcher: how a process gets onto an emulated board (Open MPI's ssh agent, and more).

``up`` writes a small shell script per cluster, ``/run/dse-cluster/<cluster>/launcher``:

``launcher BOARD COMMAND...``
    what ``ssh BOARD COMMAND...`` is to a real board, for Open MPI's ``plm_ssh_agent``: joins
    the board's cgroups, enters its network namespace and a new UTS namespace named after the
    board (ranks of boards that share a host name hang after connecting), and runs COMMAND with
    ``sh -c``, as sshd would. Leading ``-options`` (ssh's) are skipped.
``launcher --rank BOARD/DEVICE,BOARD/DEVICE,... PROGRAM...``
    put before each rank's program: the rank (``OMPI_COMM_WORLD_RANK``) joins the cgroups of
    the device at its place in the list (its CPU quota and memory cap), then execs PROGRAM.
``launcher --in BOARD[/DEVICE] PROGRAM...``
    runs PROGRAM on a board, in the board's or a device's cgroups (the self-check's kernel).

A shell script, not Python: Open MPI starts it once per board and every rank passes through it,
and sh starts in a millisecond.
"""

from __future__ import annotations

from pathlib import Path

from dse.cluster.names import CGROUP_ROOT, CONTROLLERS, PREFIX, Names
from dse.cluster.net import NETNS_DIR

NAME = "launcher"

SCRIPT = r"""#!/bin/sh
# The launcher of the emulated cluster @CLUSTER@ (written by dse.cluster up, removed by down).
#   launcher BOARD COMMAND...                 Open MPI's ssh agent: run COMMAND on BOARD
#   launcher --rank B/D,B/D,... PROGRAM...     a rank joins its device's cgroups, runs PROGRAM
#   launcher --in BOARD[/DEVICE] PROGRAM...    run PROGRAM on BOARD (in a device's cgroups)
set -eu
NETNS='@NETNS@'
TOP='@TOP@'
say() { echo "dse cluster @CLUSTER@: $*" >&2; }
join() {
  for c in @CONTROLLERS@; do
    echo $$ > "@CGROUP_ROOT@/$c/$TOP/$1/cgroup.procs" || { say "cannot join $1"; exit 126; }
  done
}
board() {
  [ -e "$NETNS.$1" ] || { say "no board $1 (is the cluster up?)"; exit 255; }
}
case "${1:-}" in
--rank)
  [ $# -ge 3 ] || { say "usage: launcher --rank B/D,... PROGRAM..."; exit 2; }
  list=$2; shift 2
  rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}
  [ -n "$rank" ] || { say "--rank: no OMPI_COMM_WORLD_RANK in the environment"; exit 126; }
  target=$(printf '%s\n' "$list" | cut -d, -f$((rank + 1)))
  [ -n "$target" ] || { say "--rank: rank $rank has no device in $list"; exit 126; }
  join "$target"
  exec "$@" ;;
--in)
  [ $# -ge 3 ] || { say "usage: launcher --in BOARD[/DEVICE] PROGRAM..."; exit 2; }
  target=$2; shift 2
  b=${target%%/*}
  board "$b"
  join "$target"
  exec nsenter --net="$NETNS.$b" unshare --uts \
    sh -c 'printf %s "$0" > /proc/sys/kernel/hostname && exec "$@"' "$b" "$@" ;;
*)
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
  [ $# -ge 2 ] || { say "usage: launcher BOARD COMMAND..."; exit 2; }
  b=$1; shift
  board "$b"
  join "$b"
  exec nsenter --net="$NETNS.$b" unshare --uts \
    sh -c 'printf %s "$0" > /proc/sys/kernel/hostname && exec sh -c "$1"' "$b" "$*" ;;
esac
"""


def script(names: Names) -> str:
    """The launcher of the cluster ``names.cluster`` (its name is letters, digits, _ and -)."""
    values = {
        "@CLUSTER@": names.cluster,
        "@NETNS@": str(NETNS_DIR / names.switch_ns),
        "@TOP@": f"{PREFIX}{names.cluster}",
        "@CONTROLLERS@": " ".join(CONTROLLERS),
        "@CGROUP_ROOT@": str(CGROUP_ROOT),
    }
    text = SCRIPT
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def path(names: Names) -> Path:
    return names.state_dir / NAME


def write(names: Names) -> Path:
    """Write the cluster's launcher into its state directory; its path."""
    p = path(names)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(script(names))
    tmp.chmod(0o755)
    tmp.replace(p)
    return p
