"""Deployments shipped to hosts that have disks of their own, and their measurements fetched.

A run on such hosts (a :class:`~dse.runtime.launch.mpiexec.Launcher` with a :class:`Remote`)
first copies to every host the files its ranks read, and only those: ``plan.json``, the whole
model's expected outputs, and the sub-models of its ranks with their weights files
(:func:`host_files`). They go to the same folder on every host (:meth:`Remote.directory`: the
deployment area, then the deployment's name and a digest of where it lies on this machine), so
the ranks' command line names one folder, as mpiexec needs.

The copy is rsync over ssh, one per host at once: it compares each file by size and checksum
and sends only those the host lacks or holds otherwise (a mapping deployed again sends
nothing), writes each to a temporary name and renames it once whole and verified against its
checksum, and removes from the host's folder every file that is not one of them (a previous
run's measurement, a half-sent file of a copy cut short). rsync was chosen over sftp (no
comparison by content: every file sent again) and Open MPI's file preloading (every file to
every rank's session folder, at every launch).

After the run, rank 0's measurement is fetched into the deployment here. Every problem is one
line naming the host and what to check.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from dse.errors import DseError
from dse.lifetime import die_with_parent
from dse.runtime.deployment.layout import PLAN
from dse.runtime.deployment.plan import Plan
from dse.runtime.deployment.reader import read_plan, whole_model

#: Where deployments go on a host unless the platform names another folder.
AREA = "/var/tmp/dse"
#: rsync gives up on a host that has sent or taken nothing for this long (a cut link).
IO_TIMEOUT_S = 30
#: The whole copy to one host at most.
COPY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Remote:
    """How this machine reaches hosts with disks of their own: ``ssh`` (the command a host's
    name and a command follow, e.g. ``ssh -F CONFIG``) and ``area``, the folder deployments go
    to on every host (absolute)."""

    ssh: tuple[str, ...] = ("ssh",)
    area: str = AREA

    def directory(self, local: Path) -> str:
        """Where the deployment at ``local`` (on this machine) lies on every host."""
        where = Path(local).resolve()
        digest = hashlib.sha256(f"{socket.gethostname()}:{where}".encode()).hexdigest()[:12]
        return f"{self.area.rstrip('/')}/{where.name}-{digest}"


@dataclass(frozen=True)
class Copied:
    """One host's copy: its files (names), their bytes, the bytes of those it had to be sent
    (the others it held already), of which ``literal_bytes`` went over the link (the rest the
    host rebuilt from files it held: a basis's), and the seconds it took."""

    host: str
    files: list[str]
    file_bytes: int
    sent_bytes: int
    seconds: float
    literal_bytes: int = 0


@dataclass(frozen=True)
class Shipment:
    """Where the deployment lies on its hosts and what each one's copy took."""

    directory: str
    hosts: list[Copied]


def host_files(plan: Plan, directory: Path, host: str) -> list[str]:
    """The files the ranks on ``host`` read: the plan, the expected outputs, and their own
    sub-models and the weights files those name."""
    names = [PLAN]
    if plan.reference is not None:
        names.append(plan.reference.expected)
    for r in plan.ranks:
        if r.host != host:
            continue
        for segment in r.segments:
            names.append(segment)
            names += _weights_files(Path(directory) / segment)
    return list(dict.fromkeys(names))


def _weights_files(path: Path) -> list[str]:
    model = onnx.load(str(path), load_external_data=False)  # read_plan has checked it
    found = []
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            found += [e.value for e in t.external_data if e.key == "location"]
    return found


def rsync_path() -> str:
    found = shutil.which("rsync")
    if found is None:
        raise DseError(
            "rsync not found, and these hosts have disks of their own: install it here and on "
            "every host (apt-get install rsync)"
        )
    return found


def ship(
    directory: Path,
    plan: Plan,
    remote: Remote,
    hosts: Mapping[str, str] | None = None,
    basis: Path | None = None,
    seed: str | None = None,
) -> Shipment:
    """Copy to each host of the plan the files its ranks read (:func:`host_files`), all hosts
    at once; ``hosts``: the name ssh knows a platform host by (default: its own). ``basis``:
    another deployment (here) already shipped to the hosts, whose files there a host builds
    its copy from: a file it holds is not sent, and a file like one of them (a sub-model's
    weights with layers more or fewer) is sent as its differences only (rsync's
    ``--copy-dest`` and ``--fuzzy``). ``seed``: a file on every host holding every weight of
    the net (the whole model, staged there by :func:`ship_model`): each weights file a host
    lacks starts there as a link to it, so only what differs crosses the link (a sub-model's
    weights are the whole model's, cut and padded). One line naming the first host whose copy
    failed."""
    directory = Path(directory).resolve()
    target = remote.directory(directory)
    rsync = rsync_path()
    names = list(dict.fromkeys(r.host for r in plan.ranks))
    hosts = hosts or {}

    near = remote.directory(Path(basis)) if basis is not None else None

    def one(host: str) -> Copied:
        files = host_files(plan, directory, host)
        reach = hosts.get(host, host)
        if seed is not None:
            _seed(remote, reach, target, [f for f in files if f.endswith(".data")], seed)
        return _copy(rsync, remote, directory, files, reach, target, near)

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        copies = list(pool.map(one, names))
    return Shipment(target, copies)


def unship(directory: Path, remote: Remote, hosts: Sequence[str]) -> None:
    """Remove the deployment at ``directory`` (here) from ``hosts`` (as ssh knows them): the
    folder :func:`ship` copied it to, and nothing else. One line naming the first host where
    that failed."""
    target = remote.directory(Path(directory))
    for host in hosts:
        _run([*remote.ssh, host, f"rm -rf -- {shlex.quote(target)}"], host, "removing a plan from")


def ship_whole(directory: Path, plan: Plan, remote: Remote, host: str) -> tuple[str, str]:
    """Copy every rank's files of the deployment (:func:`host_files` of each of its hosts), and
    the whole model the plan names (:func:`ship_model`), to the one host ``host`` (as ssh
    knows it), for work that reads all of them there (calibration's timing of each sub-model
    alone, the whole network beside); where the deployment and the whole model lie on it."""
    directory = Path(directory).resolve()
    target = remote.directory(directory)
    hosts = dict.fromkeys(r.host for r in plan.ranks)
    files = [f for h in hosts for f in host_files(plan, directory, h)]
    _copy(rsync_path(), remote, directory, list(dict.fromkeys(files)), host, target)
    return target, ship_model(Path(whole_model(plan, directory)), remote, host)


def ship_model(path: Path, remote: Remote, host: str) -> str:
    """Copy the ONNX model at ``path`` and the weights files it names to ``host`` (as ssh
    knows it), into the deployment area, for work that reads it there; its path there. A
    host's disk holds the file as a real board's does: not in the memory of the device that
    reads it (on an emulated board, not charged to its memory cap)."""
    path = Path(path).resolve()
    target = f"{remote.directory(path.parent)}-{path.stem}"  # one folder a model
    _copy(rsync_path(), remote, path.parent, [path.name, *_weights_files(path)], host, target)
    return f"{target}/{path.name}"


def staged_seed(path: Path, remote: Remote, host: str) -> str:
    """Stage the whole model at ``path`` on ``host`` (:func:`ship_model`); the path there of its
    largest file (its weights, inline or external): the ``seed`` of :func:`ship`."""
    path = Path(path).resolve()
    where = ship_model(path, remote, host)
    largest = max(
        [path.name, *_weights_files(path)], key=lambda n: (path.parent / n).stat().st_size
    )
    return f"{where.rsplit('/', 1)[0]}/{largest}"


def _seed(remote: Remote, host: str, target: str, names: Sequence[str], seed: str) -> None:
    """On ``host``, each of ``names`` that ``target`` lacks made a link to (or, across file
    systems, a copy of) ``seed``: the base rsync sends its file's differences from. Even where
    the basis holds a file of that name: the basis's may hold other layers, whose weights
    would then cross the link (a slow one, when a re-plan follows a slow port); the whole
    model holds every weight, at the cost of reading it on the host once per file."""
    q = shlex.quote
    links = " ".join(
        f"{{ [ -e {q(n)} ] || ln {q(seed)} {q(n)} 2>/dev/null || cp {q(seed)} {q(n)}; }} &&"
        for n in names
    )
    command = f"mkdir -p {q(target)} && cd {q(target)} && {links} true"
    _run([*remote.ssh, host, command], host, "preparing the deployment's folder on")


def _copy(
    rsync: str,
    remote: Remote,
    directory: Path,
    files: Sequence[str],
    host: str,
    target: str,
    basis: str | None = None,
) -> Copied:
    cmd = [rsync, "--recursive", "--times", "--checksum", "--mkpath", "--stats"]
    cmd += ["--delete", "--delete-excluded", f"--timeout={IO_TIMEOUT_S}"]
    if basis is not None:  # its files on the host: copied there, or the base of a delta
        cmd += [f"--copy-dest={basis}", "--fuzzy", "--fuzzy"]
    cmd += ["--rsh", shlex.join(remote.ssh)]
    cmd += [f"--include=/{name}" for name in files] + ["--exclude=*"]
    cmd += [f"{directory}/", f"{host}:{target}/"]
    started = time.perf_counter()
    proc = _run(cmd, host, "copying the deployment to")
    seconds = time.perf_counter() - started
    total = sum((directory / name).stat().st_size for name in files)
    sent = _stat(proc.stdout, "Total transferred file size")
    literal = _stat(proc.stdout, "Literal data")
    return Copied(host, list(files), total, sent, seconds, literal)


def fetch(remote: Remote, host: str, source: str, directory: Path) -> None:
    """Copy the file ``source`` of ``host`` into ``directory`` here, if it exists there."""
    cmd = [rsync_path(), "--times", "--ignore-missing-args", f"--timeout={IO_TIMEOUT_S}"]
    cmd += ["--rsh", shlex.join(remote.ssh), f"{host}:{source}", f"{Path(directory)}/"]
    _run(cmd, host, "fetching the measurement from")


def _run(cmd: list[str], host: str, doing: str) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=COPY_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
        )
    except subprocess.TimeoutExpired:
        raise DseError(
            f"{doing} host {host} took over {COPY_TIMEOUT_S:g} s: check its link"
        ) from None
    if proc.returncode != 0:
        raise DseError(f"{doing} host {host} failed: {why(proc.stderr, proc.returncode)}")
    return proc


def why(stderr: str, code: int) -> str:
    """rsync's or ssh's failure, in one line with what to check."""
    text = " ".join(stderr.split())
    lines = [t.strip() for t in stderr.splitlines() if t.strip()]
    said = next((t for t in lines if not t.startswith("rsync error")), lines[-1] if lines else "")
    if "No space left on device" in text:
        return f"its disk is full ({said}): free room there, or name another deployment area"
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION" in text:
        return (
            f"its host key is not the one known ({said}): if the host was reinstalled, "
            "update known_hosts"
        )
    if "rsync: command not found" in text or "rsync: not found" in text:
        return "it lacks rsync: install it there (apt-get install rsync)"
    if code == 255 or "ssh:" in text or "Connection" in text:
        return f"ssh cannot reach it ({said}): check that it is on and its sshd runs"
    if code == 30 or "timeout" in text:
        return f"it stopped answering ({said}): check its link"
    return said or f"rsync exited with {code}"


def main(argv: list[str] | None = None) -> int:
    """``python -m dse.runtime.launch.ship DIR --rsh SSH [--area AREA] [--host=HOST=NAME]...``:
    ship a deployment by hand (its ``run.sh`` does); one line per host, or one error line."""
    parser = argparse.ArgumentParser(prog="python -m dse.runtime.launch.ship")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--rsh", default="ssh", help="the ssh command (default: ssh)")
    parser.add_argument("--area", default=AREA, help=f"the hosts' folder (default: {AREA})")
    parser.add_argument("--host", action="append", default=[], help="HOST=NAME for ssh")
    args = parser.parse_args(argv)
    try:
        hosts = dict(_host(h) for h in args.host)
        rsh = _rsh(args.rsh)
        plan = read_plan(args.directory)
        shipment = ship(args.directory, plan, Remote(rsh, args.area), hosts)
    except (DseError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for c in shipment.hosts:
        print(
            f"{c.host}: {len(c.files)} files, {c.file_bytes:,} B, {c.sent_bytes:,} B sent "
            f"in {c.seconds:.2f} s -> {shipment.directory}"
        )
    return 0


def _host(option: str) -> tuple[str, str]:
    """``--host HOST=NAME``: the plan's host and the name ssh reaches it by."""
    host, _, name = option.partition("=")
    if not host or not name:
        raise DseError(
            f"--host {option} must be HOST=NAME: the plan's host, then the name ssh reaches it "
            "by (e.g. --host xavier0=192.168.1.10)"
        )
    return host, name


def _rsh(option: str) -> tuple[str, ...]:
    """``--rsh COMMAND``: the ssh command's words, split as a shell would."""
    try:
        words = tuple(shlex.split(option))
    except ValueError as exc:
        raise DseError(
            f"--rsh {option!r} is not a command ({exc}): quote it as a shell would, e.g. "
            "--rsh 'ssh -p 2222'"
        ) from None
    if not words:
        raise DseError(f"--rsh {option!r} is not a command: give the ssh command, e.g. --rsh ssh")
    return words


def _stat(output: str, label: str) -> int:
    """A figure of rsync's ``--stats`` (bytes, thousands separated by commas)."""
    found = re.search(rf"^{re.escape(label)}: ([\d,.]+) bytes", output, re.MULTILINE)
    return int(found.group(1).replace(",", "").replace(".", "")) if found else 0


if __name__ == "__main__":
    sys.exit(main())
