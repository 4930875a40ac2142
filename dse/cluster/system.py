"""The kernel's tools a cluster is built with (ip, tc, nsenter, unshare, chrt), and what is missing.

Every command runs without a shell; a failure is one line naming the command and the kernel's
answer. :func:`missing` says in one line what this machine lacks for an emulated cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from dse.cluster.names import CGROUP_ROOT
from dse.errors import DseError

TOOLS = ("ip", "tc", "nsenter", "unshare", "chrt")
#: A file each cgroup v1 controller has, proving it is mounted where the cluster expects it.
CGROUP_FILES = {
    "cpu": "cpu.cfs_quota_us",
    "cpuset": "cpuset.cpus",
    "memory": "memory.limit_in_bytes",
}


class CommandError(DseError):
    """A command the cluster is built with failed."""


def run(*args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run a command; with ``check``, a failure raises one line: the command and its stderr."""
    try:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise CommandError(f"{args[0]} not found: install iproute2 and util-linux") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"`{' '.join(args)}` did not finish in {timeout:g} s") from None
    if check and proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise CommandError(f"`{' '.join(args)}` failed: {why[0] if why else proc.returncode}")
    return proc


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip [-n ns] args``."""
    return run("ip", *(("-n", ns) if ns else ()), *args, check=check)


def tc(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``tc [-n ns] args``."""
    return run("tc", *(("-n", ns) if ns else ()), *args, check=check)


def missing() -> list[str]:
    """What this machine lacks for an emulated cluster (empty: nothing)."""
    lacks = []
    if os.geteuid() != 0:
        lacks.append("root (network namespaces, tc and cgroups need it: run as root)")
    tools = [t for t in TOOLS if shutil.which(t) is None]
    if tools:
        lacks.append(f"the commands {', '.join(tools)} (iproute2, util-linux)")
    for ns in ("net", "uts"):
        if not Path(f"/proc/self/ns/{ns}").exists():
            lacks.append(f"{ns} namespaces (a kernel with CONFIG_{ns.upper()}_NS)")
    controllers = [c for c, f in CGROUP_FILES.items() if not (CGROUP_ROOT / c / f).is_file()]
    if controllers:
        lacks.append(
            f"cgroup v1 controllers {', '.join(controllers)} mounted at {CGROUP_ROOT}/<name> "
            "(cgroup v2 alone is not supported)"
        )
    return lacks


def require() -> None:
    """One line if anything is missing."""
    lacks = missing()
    if lacks:
        raise DseError(f"cannot emulate a cluster on this machine: it lacks {'; '.join(lacks)}")
