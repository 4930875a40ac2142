"""The launcher: how a process gets onto an emulated board without ssh (and the rank script).

Boards are hosts reached by ssh (:mod:`dse.cluster.hosts`), and Open MPI reaches them so, as it
does real boards. ``up`` writes two small shell scripts per cluster into
``/run/dse-cluster/<cluster>/`` for what ssh cannot do:

``launcher BOARD COMMAND...``
    Open MPI's ssh agent on a cluster whose devices get their shares from co-runners
    (``cpu_share=corunner``) only: it starts the board's co-runners (busy processes that must
    live exactly as long as the run on the board, :func:`dse.cluster.cpu.corunner_groups`),
    joins the board's cgroups, enters the board's namespaces (network; mount: its own disk;
    UTS: its host name) through its sshd's, and runs COMMAND with ``sh -c``, as sshd would.
    Leading ``-options`` (ssh's) are skipped. Open MPI's daemon of the board stays a child of
    it, in mpiexec's session: killing the session kills the daemon.
``launcher --in BOARD[/DEVICE] PROGRAM...``
    runs PROGRAM on a board, in the board's or a device's cgroups (with the board's
    co-runners if any, as above): the self-check's probes and the speed probe, which must
    start in a device's cgroups, where ssh would start them in the board's.
``rank BOARD/DEVICE,BOARD/DEVICE,... PROGRAM...``
    put before each rank's program: the rank (``OMPI_COMM_WORLD_RANK``) joins the cgroups of
    the device at its place in the list (its CPU share and memory cap), then execs PROGRAM.
    On a device of a share below a whole CPU (under weights or co-runners) PROGRAM gets the
    device's speed in :data:`~dse.runtime.rank.pace.PACE_ENV`, as with ``--in`` on a device: its
    onnxruntime sessions compute each burst at the device's speed (:mod:`dse.runtime.rank.pace`). (A
    file of its own: mpiexec mistakes a program whose path equals its ssh agent's for the
    agent's argument and takes the rest of its own command line for the program's.)

Where ranks are paced (weights, co-runners), every device has a **pace file**,
``pace/<device>`` in the same directory: its speed in CPUs, or ``none`` for a whole CPU
(:data:`~dse.runtime.rank.pace.UNPACED`). Both scripts give a process on a device its path in
:data:`~dse.runtime.rank.pace.PACE_FILE_ENV`, and a new share (:mod:`dse.cluster.live`)
rewrites the file and the scripts: a rank that runs follows the file, one that starts later
gets the new speed from both.

Under weights and co-runners, every rank runs under ``SCHED_BATCH`` (``chrt -b``: the rank
script sets it, and the launcher for all it starts, which inherits it): a
process of that policy that wakes does not preempt the one running, it waits for the
scheduler's next decision. A rank that waits for a message wakes often to poll
(:mod:`dse.runtime.rank.waits`); under the default policy each poll preempted the device beside it
on its CPU (:data:`dse.cluster.cpu.RANK_POLICY` says why not under quotas). Real boards'
devices do not share a core.

Shell scripts, not Python: Open MPI starts the launcher once per board and every rank passes
through ``rank``, and sh starts in a millisecond.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from dse.cluster.cpu import (
    CORUNNER_PROGRAM,
    RANK_POLICY,
    corunner_dirs,
    corunner_groups,
    pace_speed,
)
from dse.cluster.names import CGROUP_ROOT, CONTROLLERS, PREFIX, Names
from dse.cluster.net import NETNS_DIR
from dse.cluster.spec import ClusterSpec
from dse.runtime.rank.pace import PACE_ENV, PACE_FILE_ENV, UNPACED

LAUNCHER = "launcher"
RANK = "rank"
PACE_DIR = "pace"

COMMON = r"""#!/bin/sh
# @WHAT@ of the emulated cluster @CLUSTER@ (written by dse.cluster up, removed by down).
set -eu
NETNS='@NETNS@'
TOP='@TOP@'
say() { echo "dse cluster @CLUSTER@: $*" >&2; }
join() {
  for c in @CONTROLLERS@; do
    echo $$ > "@CGROUP_ROOT@/$c/$TOP/$1/cgroup.procs" || { say "cannot join $1"; exit 126; }
  done
@POLICY@}
"""

LAUNCHER_BODY = r"""
#   launcher BOARD COMMAND...               Open MPI's ssh agent: run COMMAND on BOARD
#   launcher --in BOARD[/DEVICE] PROGRAM...  run PROGRAM on BOARD (in a device's cgroups)
board() {
  [ -e "$NETNS.$1" ] || { say "no board $1 (is the cluster up?)"; exit 255; }
  sshd=$(cat "@STATE@/boards/$1/sshd.pid" 2>/dev/null) && [ -d "/proc/$sshd" ] ||
    { say "board $1 is down (its sshd does not run): bring the cluster up again"; exit 255; }
}
if [ "${1:-}" = --in ]; then
  [ $# -ge 3 ] || { say "usage: launcher --in BOARD[/DEVICE] PROGRAM..."; exit 2; }
  target=$2; shift 2
  b=${target%%/*}
  board "$b"
  corun "$b"
  join "$target"
  pace "$target"
  exec nsenter -t "$sshd" --net --mount --uts --wd=/ "$@"
fi
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
[ $# -ge 2 ] || { say "usage: launcher BOARD COMMAND..."; exit 2; }
b=$1; shift
board "$b"
corun "$b"
join "$b"
exec nsenter -t "$sshd" --net --mount --uts --wd=/ sh -c "$*"
"""

RANK_BODY = r"""
#   rank BOARD/DEVICE,BOARD/DEVICE,... PROGRAM...  rank r joins the r-th device's cgroups
[ $# -ge 2 ] || { say "usage: rank B/D,... PROGRAM..."; exit 2; }
list=$1; shift
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}
[ -n "$rank" ] || { say "rank: no OMPI_COMM_WORLD_RANK in the environment"; exit 126; }
target=$(printf '%s\n' "$list" | cut -d, -f$((rank + 1)))
[ -n "$target" ] || { say "rank: rank $rank has no device in $list"; exit 126; }
join "$target"
pace "$target"
exec "$@"
"""


def corun_function(spec: ClusterSpec, names: Names) -> str:
    """The launcher's ``corun BOARD``: start the board's co-runners, children of the script's
    process (which execs into the command it runs: they poll it and end with it)."""
    lines = [f"PY={shlex.quote(sys.executable)}", f"CORUN={shlex.quote(CORUNNER_PROGRAM)}"]
    lines += ["corun() {", '  case "$1" in']
    for b in spec.boards:
        starts = []
        for group in corunner_groups(spec, b.name):
            dirs = " ".join(shlex.quote(d) for d in corunner_dirs(names, group.parts))
            line = f'"$PY" -S -c "$CORUN" "$$" {dirs} </dev/null >/dev/null 2>&1 &'
            starts += [f"      {line}"] * len(group.cpus)
        if starts:
            lines += [f"    {b.name})", *starts, "      ;;"]
    lines += ["  esac", "}", ""]
    return "\n".join(lines)


def pace_function(spec: ClusterSpec, names: Names) -> str:
    """Both scripts' ``pace BOARD/DEVICE``: export :data:`~dse.runtime.rank.pace.PACE_ENV`, the
    speed a rank on the device is paced to (:func:`dse.cluster.cpu.pace_speed`), if any, and
    where ranks are paced the device's pace file (:data:`PACE_FILE_ENV`)."""
    lines = ["pace() {", '  case "$1" in']
    for d in spec.devices:
        speed = pace_speed(spec, d.name)
        exports = [] if speed is None else [f"{PACE_ENV}={speed:g}"]
        if spec.weighted:
            exports.append(f"{PACE_FILE_ENV}={shlex.quote(str(pace_file(names, d.name)))}")
        if exports:
            lines.append(f"    {d.board}/{d.name}) export {' '.join(exports)} ;;")
    lines += ["  esac", "}", ""]
    return "\n".join(lines)


def pace_file(names: Names, device: str) -> Path:
    """The device's pace file (read by :class:`dse.runtime.rank.pace.Pace`)."""
    return names.state_dir / PACE_DIR / device


def write_pace_files(names: Names, spec: ClusterSpec) -> None:
    """Where ranks are paced, each device's pace file: its speed, or ``none`` (a whole CPU);
    each written by a new name and renamed (a rank never reads one half written)."""
    if not spec.weighted:
        return
    (names.state_dir / PACE_DIR).mkdir(parents=True, exist_ok=True)
    for d in spec.devices:
        speed = pace_speed(spec, d.name)
        p = pace_file(names, d.name)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_text(f"{UNPACED if speed is None else f'{speed:g}'}\n")
        tmp.replace(p)


def policy_line(spec: ClusterSpec) -> str:
    """The line of ``join`` that sets the shell's scheduling policy (:data:`RANK_POLICY`; what
    it execs keeps it), or nothing."""
    flag = RANK_POLICY[spec.cpu_share]
    if flag is None:
        return ""
    fail = f'{{ say "cannot set the scheduling policy (chrt {flag})"; exit 126; }}'
    return f"  chrt {flag} -p 0 $$ >/dev/null || {fail}\n"


def script(names: Names, which: str, spec: ClusterSpec) -> str:
    """The ``launcher`` or ``rank`` script of the cluster ``names.cluster`` (its name is
    letters, digits, _ and -: safe inside the script's quotes)."""
    body = LAUNCHER_BODY if which == LAUNCHER else RANK_BODY
    body = pace_function(spec, names) + body
    if which == LAUNCHER:
        body = corun_function(spec, names) + body
    values = {
        "@WHAT@": f"The {which} script",
        "@CLUSTER@": names.cluster,
        "@NETNS@": str(NETNS_DIR / names.switch_ns),
        "@TOP@": f"{PREFIX}{names.cluster}",
        "@CONTROLLERS@": " ".join(CONTROLLERS),
        "@CGROUP_ROOT@": str(CGROUP_ROOT),
        "@POLICY@": policy_line(spec),
        "@STATE@": str(names.state_dir),
    }
    text = COMMON + body
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def path(names: Names, which: str = LAUNCHER) -> Path:
    return names.state_dir / which


def write(names: Names, spec: ClusterSpec) -> None:
    """Write the cluster's pace files, launcher and rank scripts into its state directory."""
    names.state_dir.mkdir(parents=True, exist_ok=True)
    write_pace_files(names, spec)
    for which in (LAUNCHER, RANK):
        p = path(names, which)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(script(names, which, spec))
        tmp.chmod(0o755)
        tmp.replace(p)
