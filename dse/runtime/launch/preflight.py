"""The preflight of hosts with disks of their own: can a run go there, before anything is copied.

:func:`preflight` reaches every host with the launcher's ssh
(:class:`~dse.runtime.launch.ship.Remote`) and checks, for each host, one line per problem
naming the host and the fix:

- **ssh** logs in without a password and knows the host's key (``BatchMode``: nothing asks);
- **host names** differ between hosts (Open MPI's ranks hang when two boards share one);
- **versions**: the same Python (at this machine's path), ``dse``, mpi4py and Open MPI as
  here (mpiexec starts its own daemons there, and the ranks run this ``dse``);
- **the deployment area** can be written (its free room is shown; a copy that does not fit
  fails naming the host, :mod:`dse.runtime.launch.ship`);
- **memory**: the host has as much free as its devices' ``memory_mb`` add up to;
- **TCP** between every pair of hosts, both ways, to the address this machine reaches each by
  (where MPI's daemons and ranks meet);
- **clocks** within :data:`MAX_SKEW_S` of this machine's (the host's clock, read while this
  machine's went from t0 to t1, is off by at least its distance to [t0, t1]).

What runs on a host is :data:`PROBE` and :data:`LISTEN`/:data:`CONNECT`, Python sent by ssh;
nothing of a deployment is executed. ``python -m dse.cluster check platform=NAME`` prints it
as a table; a run on such hosts checks them once per process before its first copy
(:func:`checked_once`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from dse.errors import DseError
from dse.lifetime import die_with_parent
from dse.runtime.launch.ship import Remote

#: A host's clock may be this far from this machine's (seconds).
MAX_SKEW_S = 1.0
#: How long one host's probe may take.
PROBE_TIMEOUT_S = 30.0

#: What a host reports (argv: the deployment area): JSON on one line.
PROBE = r"""
import json, os, shutil, socket, sys, time
out = {"hostname": socket.gethostname(), "python": sys.version.split()[0], "time": time.time()}
out["address"] = (os.environ.get("SSH_CONNECTION", "").split() + ["", "", ""])[2]
area = sys.argv[1]
try:
    os.makedirs(area, exist_ok=True)
    test = os.path.join(area, ".dse-preflight-%d" % os.getpid())
    open(test, "w").close()
    os.remove(test)
    out["area_free"] = shutil.disk_usage(area).free
except OSError as e:
    out["area_error"] = e.strerror or str(e)
try:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    out["mem_available"] = int(info["MemAvailable"].split()[0]) * 1024
except (OSError, KeyError, ValueError):
    pass
try:
    import dse.runtime
    from importlib.metadata import version
    out["dse"] = version("dse")
except Exception as e:
    out["dse_error"] = str(e)
try:
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI
    out["mpi4py"] = mpi4py.__version__
    out["mpi"] = MPI.Get_library_version().split(",")[0].strip()
except Exception as e:
    out["mpi4py_error"] = str(e)
print(json.dumps(out))
"""
#: On one host: listen on a free port of every address, print it, answer one connection; end
#: then, at the latest after argv[1] seconds, or as soon as its input closes (ssh gone).
LISTEN = r"""
import select, socket, sys, time
s = socket.socket()
s.bind(("", 0))
s.listen(4)
print(s.getsockname()[1], flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    ready, _, _ = select.select([s, sys.stdin], [], [], 0.2)
    if sys.stdin in ready and not sys.stdin.read(1):
        break
    if s in ready:
        c, _ = s.accept()
        c.sendall(b"dse")
        c.close()
        break
"""
#: On another: connect to address:port, read what the listener says.
CONNECT = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.recv(3).decode())
"""


@dataclass(frozen=True)
class Problem:
    host: str
    problem: str
    fix: str

    def line(self) -> str:
        return f"{self.host}: {self.problem}: {self.fix}"


@dataclass(frozen=True)
class HostFigures:
    """What a host reported (empty where it could not be reached)."""

    host: str
    hostname: str = ""
    address: str = ""
    python: str = ""
    dse: str = ""
    mpi: str = ""
    area_free_mb: float = 0.0
    memory_free_mb: float = 0.0
    skew_s: float = 0.0


@dataclass(frozen=True)
class Preflight:
    hosts: list[HostFigures]
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def here() -> dict[str, str]:
    """This machine's versions, as a host's are compared with."""
    try:
        ours = version("dse")
    except PackageNotFoundError:
        ours = ""
    import mpi4py

    mpi4py.rc.initialize = False
    from mpi4py import MPI

    return {
        "python": sys.version.split()[0],
        "dse": ours,
        "mpi4py": mpi4py.__version__,
        "mpi": MPI.Get_library_version().split(",")[0].strip(),
    }


def _ssh(remote: Remote, host: str, code: str, *args: str, timeout: float = PROBE_TIMEOUT_S
         ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -c code args`` on ``host`` (this machine's Python path, as the ranks')."""
    command = shlex.join([sys.executable, "-c", code, *args])
    return subprocess.run(
        [*remote.ssh, host, command], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, preexec_fn=die_with_parent(),
    )  # fmt: skip


def _reach_problem(host: str, proc: subprocess.CompletedProcess[str]) -> Problem:
    err = " ".join(proc.stderr.split())
    said = err[-200:] or f"exit status {proc.returncode}"
    if "Host key verification failed" in err or "REMOTE HOST IDENTIFICATION" in err:
        return Problem(host, f"its host key is unknown or changed ({said})",
                       "check the host, then add its key to known_hosts (ssh-keyscan)")  # fmt: skip
    if "Permission denied" in err:
        return Problem(host, f"ssh asks for a password ({said})",
                       "install your key on it (ssh-copy-id)")  # fmt: skip
    if proc.returncode == 127 or "No such file or directory" in err:
        return Problem(host, f"it has no Python at {sys.executable} ({said})",
                       "install the same Python environment at the same path")  # fmt: skip
    if proc.returncode == 255:
        return Problem(host, f"ssh cannot reach it ({said})",
                       "check that it is on, its address and that its sshd runs")  # fmt: skip
    return Problem(host, f"the probe failed ({said})", "run it by hand with ssh to see why")


def _probe(remote: Remote, host: str) -> tuple[dict[str, Any] | None, Problem | None, float]:
    t0 = time.time()
    try:
        proc = _ssh(remote, host, PROBE, remote.area)
    except subprocess.TimeoutExpired:
        return None, Problem(host, f"no answer in {PROBE_TIMEOUT_S:g} s", "check its link"), 0.0
    t1 = time.time()
    if proc.returncode != 0:
        return None, _reach_problem(host, proc), 0.0
    try:
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, Problem(host, "its probe printed no figures", "run it by hand"), 0.0
    # the host's clock read between t0 and t1 here: off by at least its distance to them
    theirs = float(got["time"])
    return got, None, theirs - t1 if theirs > t1 else min(0.0, theirs - t0)


def _pair(remote: Remote, a: str, b: str, address: str) -> Problem | None:
    """TCP from ``a`` to a port ``b`` listens on at ``address``."""
    server = subprocess.Popen(
        [*remote.ssh, b, shlex.join([sys.executable, "-c", LISTEN, "15"])],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.PIPE, text=True,
        preexec_fn=die_with_parent(),
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        if not port.isdigit():
            return Problem(b, "it cannot listen on a TCP port", "check its firewall")
        proc = _ssh(remote, a, CONNECT, address, port, timeout=20)
        if proc.returncode != 0 or proc.stdout.strip() != "dse":
            why = " ".join(proc.stderr.split())[-120:] or "no answer"
            return Problem(a, f"no TCP to {b} at {address}:{port} ({why})",
                           "open TCP between the boards (a firewall?)")  # fmt: skip
        return None
    finally:
        assert server.stdin is not None
        server.stdin.close()  # the listener ends with its input, if it has not yet
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def preflight(remote: Remote, memory_mb: Mapping[str, float]) -> Preflight:
    """Check every host of ``memory_mb`` (the name ssh knows it by -> what its devices may use
    together, :func:`memory_by_host`) as the module's docstring says."""
    hosts = list(memory_mb)
    started = time.perf_counter()
    ours = here()
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        probes = dict(zip(hosts, pool.map(lambda h: _probe(remote, h), hosts), strict=True))
    problems: list[Problem] = []
    figures: list[HostFigures] = []
    for host, (got, problem, skew) in probes.items():
        if problem is not None or got is None:
            problems.append(problem or Problem(host, "no figures", "run the probe by hand"))
            figures.append(HostFigures(host))
            continue
        problems += _host_problems(host, got, ours, remote, memory_mb, skew)
        figures.append(
            HostFigures(
                host, got["hostname"], got.get("address", ""), got["python"],
                got.get("dse", ""), got.get("mpi", ""),
                round(got.get("area_free", 0) / 2**20, 1),
                round(got.get("mem_available", 0) / 2**20, 1), round(skew, 3),
            )
        )  # fmt: skip
    names: dict[str, str] = {}
    for f in figures:
        if f.hostname and f.hostname in names:
            also = f"its host name {f.hostname} is also {names[f.hostname]}'s"
            problems.append(Problem(f.host, also, "give every board its own host name"))
        names.setdefault(f.hostname, f.host)
    reached = [f for f in figures if f.address]
    pairs = [(a, b) for a in reached for b in reached if a is not b]
    with ThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
        found = pool.map(lambda p: _pair(remote, p[0].host, p[1].host, p[1].address), pairs)
        problems += [p for p in found if p is not None]
    return Preflight(figures, problems, round(time.perf_counter() - started, 2))


def _host_problems(
    host: str,
    got: dict[str, Any],
    ours: dict[str, str],
    remote: Remote,
    memory_mb: Mapping[str, float],
    skew: float,
) -> list[Problem]:
    out = []
    for key, what in (("dse", "dse"), ("mpi4py", "mpi4py")):
        if f"{key}_error" in got:
            out.append(
                Problem(
                    host,
                    f"it has no {what} ({got[f'{key}_error']})",
                    f"install {what} {ours[key]} in its Python environment",
                )
            )
    for key, what in (
        ("python", "Python"),
        ("dse", "dse"),
        ("mpi4py", "mpi4py"),
        ("mpi", "Open MPI"),
    ):
        theirs = got.get(key)
        if theirs is not None and theirs != ours[key]:
            out.append(
                Problem(
                    host,
                    f"it has {what} {theirs}, this machine {ours[key]}",
                    f"install {what} {ours[key]} there",
                )
            )
    if "area_error" in got:
        why = f"its deployment area {remote.area} cannot be written ({got['area_error']})"
        out.append(Problem(host, why, "name another reach.area, or make it writable"))
    want = memory_mb.get(host)
    if want is not None and "mem_available" in got and got["mem_available"] / 2**20 < want:
        out.append(
            Problem(
                host,
                f"it has {got['mem_available'] / 2**20:.0f} MB free, its "
                f"devices' memory_mb add up to {want:g}",
                "free memory there, or lower the devices' memory_mb",
            )
        )
    if abs(skew) > MAX_SKEW_S:
        out.append(
            Problem(
                host,
                f"its clock is {skew:+.1f} s off this machine's",
                "synchronise the clocks (NTP, chrony)",
            )
        )
    return out


def format_preflight(result: Preflight) -> str:
    """The table ``dse.cluster check`` prints, then one line per problem."""
    head = ("host", "name", "address", "Python", "dse", "MPI", "area free", "memory free", "clock")
    rows = [head] + [
        (f.host, f.hostname, f.address, f.python, f.dse, f.mpi, f"{f.area_free_mb:.0f} MB",
         f"{f.memory_free_mb:.0f} MB", f"{f.skew_s:+.3f} s")
        for f in result.hosts
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"hosts: checked over ssh in {result.seconds:.1f} s"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]  # fmt: skip
    lines += [f"problem: {p.line()}" for p in result.problems] or ["every host is ready"]
    return "\n".join(lines)


_CHECKED: dict[tuple[Any, ...], Preflight] = {}


def memory_by_host(devices: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Each host's devices' memory together, from (host, memory_mb) of every device, the hosts
    in the order they first come."""
    total: dict[str, float] = {}
    for host, mb in devices:
        total[host] = total.get(host, 0.0) + mb
    return total


def checked_once(remote: Remote, memory_mb: Mapping[str, float]) -> None:
    """:func:`preflight` of these hosts once in this process (a run's first copy waits for it);
    its first problem as one line."""
    key = (remote, tuple(memory_mb.items()))
    if key not in _CHECKED:
        _CHECKED[key] = preflight(remote, memory_mb)
    result = _CHECKED[key]
    if not result.ok:
        del _CHECKED[key]  # checked again next time: the user may have mended it
        first = result.problems[0]
        more = f" ({len(result.problems) - 1} more: python -m dse.cluster check)" if len(
            result.problems) > 1 else ""  # fmt: skip
        raise DseError(f"host {first.line()}{more}")
