"""Boards as hosts: each board of a cluster has its own disk and its own sshd, as a real board.

``up`` makes, for the cluster (under its state directory, ``ssh/``, every file 0600):

* a user key the launching side logs in with, and a host key per board;
* ``known_hosts`` with every board's host key under its name and address, and an ssh client
  config (``ssh -F ssh/config BOARD``) that logs in as root with that key only, checks the host
  key strictly and never asks (``BatchMode``): what Open MPI, rsync and
  ``python -m dse.cluster exec`` use.

Then each board boots (:data:`BOOT`): in the board's cgroups (every process it starts is
there, as a rank started through the launcher is), its network namespace, and new mount and
UTS namespaces (its host name is the board's), it mounts its **own disk**, a tmpfs of
``disk_mb`` (:attr:`dse.cluster.spec.Board.disk_mb`), over ``/tmp``, ``/var/tmp`` and root's
home ``/root``: what the board writes there, no other board and not the launching machine
sees, what this machine writes there the board does not see, and a board that boots again
finds them empty, as a real board's ``/tmp``. The Python environment and the ``dse`` checkout
stay this machine's, read-only where they lie under those folders (CI's virtual environment
is under ``/tmp``): they stand for what is installed on every board. The rest of the file
system (``/usr``, ``/run``, ``/sys``) is this machine's. Then it runs ``sshd`` on the board's
address only, port 22, key authentication only.

sshd is the board's one lasting process: :func:`listeners` names them, so that clearing a
board after a failed run (:func:`dse.cluster.build.stop_processes`) spares them, and the
cluster's launcher enters a board's namespaces through its sshd's (``launcher``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from dse.cluster.cpu import join
from dse.cluster.names import Names
from dse.cluster.net import NETNS_DIR
from dse.cluster.spec import ClusterSpec
from dse.cluster.state import State
from dse.errors import DseError

#: The folders a board has of its own (on its disk); everything else is this machine's.
PRIVATE = ("/tmp", "/var/tmp", "/root")
#: The port a board's sshd listens on (its own address only).
SSH_PORT = 22
#: What boots a board, run as ``sh -c BOOT boot BOARD DISK SIZE_MB SSHD_CONFIG SHARED...``
#: in the board's new mount namespace: ``/`` private (nothing mounted here reaches this
#: machine), the disk mounted, each of :data:`PRIVATE` bound to a folder of it, the ``SHARED``
#: paths under them bound back read-only (from this machine's folders, opened before), then
#: sshd in the foreground (the boot's process: its pid is the board's sshd).
BOOT = r"""
set -eu
b=$1 disk=$2 size=$3 conf=$4; shift 4
printf %s "$b" > /proc/sys/kernel/hostname
mount --make-rprivate /
exec 3</tmp 4</var/tmp 5</root
mount -t tmpfs -o "size=${size}m,mode=0755" "dse-board-$b" "$disk"
mkdir -p "$disk/tmp" "$disk/var-tmp" "$disk/root"
chmod 1777 "$disk/tmp" "$disk/var-tmp"
chmod 0700 "$disk/root"
for p in "$@"; do
  case "$p" in
    /tmp/*) fd=3 rel=${p#/tmp/} on=$disk/tmp ;;
    /var/tmp/*) fd=4 rel=${p#/var/tmp/} on=$disk/var-tmp ;;
    /root/*) fd=5 rel=${p#/root/} on=$disk/root ;;
    *) continue ;;
  esac
  mkdir -p "$on/$rel"
  mount --bind "/proc/self/fd/$fd/$rel" "$on/$rel"
  mount -o remount,bind,ro "$on/$rel"
done
mount --rbind "$disk/tmp" /tmp
mount --rbind "$disk/var-tmp" /var/tmp
mount --rbind "$disk/root" /root
exec 3<&- 4<&- 5<&-
cd /root
exec "$(command -v sshd || echo /usr/sbin/sshd)" -D -e -f "$conf"
"""
#: How long a board's sshd may take to listen.
BOOT_S = 10.0
#: Programs this needs on this machine, with the Debian package that has each.
PROGRAMS = {"sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}


def program(name: str) -> str | None:
    """``name`` on PATH, or in /usr/sbin (sshd, where root's PATH may lack it)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


def missing_programs() -> list[str]:
    """What this machine lacks to make boards hosts, as ``program (package)``."""
    return [f"{p} ({pkg})" for p, pkg in PROGRAMS.items() if program(p) is None]


def shared_paths() -> list[str]:
    """What every board sees as this machine has it: the Python environment (and the
    interpreter it was made from), the folders Python imports from, and the folder ``dse`` is
    imported from (a checkout, or site-packages); each once, none inside another."""
    import dse

    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path]
    found.append(str(Path(dse.__file__).parents[1]))
    paths = {Path(p).resolve() for p in found if p and Path(p).is_dir()}
    outer = [p for p in paths if not any(q != p and p.is_relative_to(q) for q in paths)]
    return sorted(str(p) for p in outer)


def ssh_dir(names: Names) -> Path:
    return names.state_dir / "ssh"


def ssh_config(names: Names) -> Path:
    """The ssh client config that reaches the cluster's boards by name (``ssh -F``)."""
    return ssh_dir(names) / "config"


def ssh_command(names: Names) -> tuple[str, ...]:
    """ssh as the launching side runs it to reach a board: ``ssh -F CONFIG`` (then the board's
    name and a command)."""
    return (program("ssh") or "ssh", "-F", str(ssh_config(names)))


def board_dir(names: Names, board: str) -> Path:
    return names.state_dir / "boards" / board


def pid_file(names: Names, board: str) -> Path:
    return board_dir(names, board) / "sshd.pid"


def _private(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


def _keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path`` (and ``.pub``); its public line."""
    keygen = program("ssh-keygen") or "ssh-keygen"
    subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    pub = path.with_name(path.name + ".pub")
    pub.chmod(0o600)
    return " ".join(pub.read_text().split()[:2])


def write_keys(state: State) -> None:
    """The user key, every board's host key and sshd config, known_hosts and the client config."""
    spec, names = state.spec, state.names
    d = ssh_dir(names)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True, mode=0o700)
    user = _keygen(d / "id_ed25519", f"dse cluster {names.cluster}")
    _private(d / "authorized_keys", user + "\n")
    known, hosts = [], []
    for b in spec.boards:
        host_key = d / f"host_{b.name}"
        pub = _keygen(host_key, f"board {b.name} of dse cluster {names.cluster}")
        address = str(state.address(b.name))
        known.append(f"{b.name},{address} {pub}\n")
        hosts.append(f"Host {b.name}\n  HostName {address}\n")
        board_dir(names, b.name).mkdir(parents=True, exist_ok=True)
        (board_dir(names, b.name) / "disk").mkdir(exist_ok=True)
        _private(d / f"sshd_{b.name}", sshd_config(names, b.name, address))
    _private(d / "known_hosts", "".join(known))
    client = [
        *hosts,
        "Host *\n",
        "  User root\n",
        f"  IdentityFile {d / 'id_ed25519'}\n",
        "  IdentitiesOnly yes\n",
        f"  UserKnownHostsFile {d / 'known_hosts'}\n",
        "  GlobalKnownHostsFile /dev/null\n",
        "  StrictHostKeyChecking yes\n",
        "  CheckHostIP no\n",
        "  BatchMode yes\n",
        "  ConnectTimeout 5\n",
        "  ServerAliveInterval 5\n",
        "  ServerAliveCountMax 3\n",
        "  LogLevel ERROR\n",
    ]
    _private(ssh_config(names), "".join(client))


def sshd_config(names: Names, board: str, address: str) -> str:
    d = ssh_dir(names)
    return "".join(
        f"{line}\n"
        for line in (
            f"ListenAddress {address}:{SSH_PORT}",
            f"HostKey {d / f'host_{board}'}",
            f"PidFile {pid_file(names, board)}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 64",
            "LogLevel ERROR",
            "Subsystem sftp internal-sftp",
        )
    )


def boot(spec: ClusterSpec, names: Names, board: str) -> subprocess.Popen:
    """Start the board ``board`` (:data:`BOOT`) in its cgroups and namespaces; its sshd."""
    b = spec.board(board)
    d = board_dir(names, board)
    pid_file(names, board).unlink(missing_ok=True)
    cmd = ["nsenter", f"--net={NETNS_DIR / names.board_ns(board)}"]
    cmd += ["unshare", "--mount", "--uts", "--propagation", "private"]
    cmd += ["sh", "-c", BOOT, "boot", board, str(d / "disk"), str(b.disk_mb)]
    cmd += [str(ssh_dir(names) / f"sshd_{board}"), *shared_paths()]
    mkdir_run_sshd()
    with open(d / "sshd.log", "ab") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd="/",
            start_new_session=True,  # it outlives `up`
            preexec_fn=lambda: join(os.getpid(), names, board),
        )


def mkdir_run_sshd() -> None:
    """sshd's privilege separation folder (Debian's service makes it at start)."""
    run = Path("/run/sshd")
    run.mkdir(mode=0o755, exist_ok=True)


def start(state: State) -> None:
    """Every board's keys and sshd; returns once each listens (one line naming a board that
    does not, with its log's last line)."""
    lacks = missing_programs()
    if lacks:
        raise DseError(
            f"boards need OpenSSH's server and client on this machine, which lacks "
            f"{', '.join(lacks)}: apt-get install openssh-server openssh-client rsync"
        )
    write_keys(state)
    procs = {b.name: boot(state.spec, state.names, b.name) for b in state.spec.boards}
    for board, proc in procs.items():
        wait_listening(state, board, proc)


def wait_listening(state: State, board: str, proc: subprocess.Popen) -> None:
    """Until the board's sshd (``proc``, just booted) listens on its address."""
    names, address = state.names, str(state.address(board))
    deadline = time.monotonic() + BOOT_S
    while True:
        with contextlib.suppress(OSError), socket.create_connection((address, SSH_PORT), 0.5):
            return
        code = proc.poll()
        if code is not None or time.monotonic() > deadline:
            why = last_line(board_dir(names, board) / "sshd.log") or "no output"
            how = f"exited with {code}" if code is not None else f"not listening after {BOOT_S:g} s"
            raise DseError(f"board {board} did not boot: its sshd {how} ({why})")
        time.sleep(0.05)


def last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [t.strip() for t in path.read_text(errors="replace").splitlines() if t.strip()]
        return lines[-1] if lines else ""
    return ""


def listener(names: Names, board: str) -> int | None:
    """The pid of the board's sshd, while it runs."""
    try:
        pid = int(pid_file(names, board).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def listeners(names: Names, boards: Iterable[str]) -> set[int]:
    """The pids of the boards' sshd that run."""
    return {pid for b in boards if (pid := listener(names, b)) is not None}
