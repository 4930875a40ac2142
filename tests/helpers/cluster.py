"""Emulated clusters for tests: a small two-board test platform, the prefix of test clusters'
names (``tests/cluster/conftest.py`` makes them unique), waiting for a process to reach a
board, and what is left on the boards."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import yaml

from dse.cluster import parse_spec, up
from dse.cluster.hosts import ssh_config
from dse.cluster.names import CGROUP_ROOT, CONTROLLERS
from dse.cluster.state import State

CONF = Path(__file__).resolve().parents[2] / "conf" / "platform"
TEST_PREFIX = "dsetest-"
TWO_CPUS = (os.cpu_count() or 1) >= 2


def platform_yaml(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())


def edge3_up(name: str) -> tuple[dict, State]:
    """edge3_ethernet as shipped, up under the name ``name`` (a test's own, from its
    ``cluster_names`` fixture, which takes it down): its platform file and state."""
    cfg = {**platform_yaml("edge3_ethernet"), "name": name}
    return cfg, up(parse_spec(cfg))


def make_platform(name: str = "tplat", network: str = "switched") -> dict:
    """Two boards: tb0 (a whole CPU, one device of 300 MB) and tb1 (another CPU shared 0.6 /
    0.4 by two devices); tb0's port 200 Mbit/s, tb1's 100 (a pair gets the slower, 100)."""
    return {
        "name": name,
        "coefficients": "localhost.json",
        "shared_network": network == "shared",
        "devices": [
            {"name": "tb0_cpu", "host": "tb0", "kind": "cpu", "threads": 1, "memory_mb": 300},
            {"name": "tb1_cpu0", "host": "tb1", "kind": "cpu", "threads": 1, "memory_mb": 512},
            {"name": "tb1_cpu1", "host": "tb1", "kind": "cpu", "threads": 1, "memory_mb": 512},
        ],
        "links": {
            "same_host": {"latency_s": 5e-6, "bandwidth_Bps": 5e9},
            "network": {"latency_s": 1.5e-4, "bandwidth_Bps": 1.2e7},
        },
        "emulation": {
            "network": network,
            "rate_mbit": 200 if network == "switched" else 100,
            "boards": {
                "tb0": {"cpus": [0]},
                "tb1": {"cpus": [1], **({"rate_mbit": 100} if network == "switched" else {})},
            },
            "devices": {
                "tb0_cpu": {"share": 1.0},
                "tb1_cpu0": {"share": 0.6},
                "tb1_cpu1": {"share": 0.4},
            },
        },
    }


def wait_on_board(state: State, proc: subprocess.Popen, board: str) -> None:
    """Until the launcher has put ``proc`` on ``board`` (in its network namespace)."""
    deadline = time.monotonic() + 10
    cmd = ["ip", "netns", "pids", state.names.board_ns(board)]
    while str(proc.pid) not in subprocess.run(cmd, capture_output=True, text=True).stdout.split():
        assert time.monotonic() < deadline, f"{proc.args} never reached {board}"
        time.sleep(0.02)


def left_on_boards(state: State) -> list[str]:
    """Processes in the cluster's board namespaces or cgroups but the boards' sshd listeners
    (read with ip, the cgroup files and the processes' titles, not dse's code)."""
    found = []
    for b in state.spec.boards:
        ns = state.names.board_ns(b.name)
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        found += [f"{ns}: {p} {title(int(p))}" for p in pids.split() if not sshd_listener(int(p))]
    for controller in CONTROLLERS:
        top = CGROUP_ROOT / controller / f"dse.{state.name}"
        for procs in top.rglob("cgroup.procs"):
            pids = procs.read_text().split()
            found += [
                f"{procs.parent}: {p} {title(int(p))}" for p in pids if not sshd_listener(int(p))
            ]
    return found


def title(pid: int) -> str:
    """A process's command line (its title), or '' once it is gone."""
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def sshd_listener(pid: int) -> bool:
    """Whether ``pid`` is an sshd waiting for connections (its title says so)."""
    t = title(pid)
    return t.startswith("sshd: ") and "[listener]" in t


def wait_for_ranks(state: State, board: str, timeout_s: float = 30.0) -> bool:
    """Until a rank of the runtime runs in ``board``'s namespace."""
    ns = state.names.board_ns(board)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"dse.runtime" in cmd:
                return True
        time.sleep(0.05)
    return False


def board_ssh(state: State, board: str, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` on ``board`` with plain ssh and the cluster's client config."""
    cmd = ["ssh", "-F", str(ssh_config(state.names)), board, command]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
