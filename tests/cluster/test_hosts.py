"""Boards as hosts: each has its own disk and its own sshd and is reached by ssh; a run ships
each board the files its ranks read, and a board that cannot take them is one line naming it.

What the tests read, they read with ssh, ip, the /proc files and rsync's own figures, not with
the code under test."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from importlib.metadata import version
from pathlib import Path

import pytest

import dse
from dse.cluster import launcher_for, parse_spec, set_link, up
from dse.cluster.build import reboot
from dse.cluster.hosts import listener, ssh_config, ssh_dir
from dse.cluster.runs import hosts_launcher
from dse.cluster.state import State
from dse.platform import load_platform
from dse.runtime.deployment.layout import SHIPPED
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import launch
from dse.runtime.launch.preflight import format_preflight, preflight
from tests.helpers.cli import run_module
from tests.helpers.cluster import board_ssh as ssh
from tests.helpers.cluster import left_on_boards, make_platform
from tests.helpers.nets import heavy_net, on_devices, small_net

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

#: tb1's disk (MB): room for a small network, not for a 94 MiB layer.
TB1_DISK_MB = 64


@pytest.fixture(scope="module")
def hosted(cluster_names) -> tuple[dict, State]:
    cfg = make_platform(cluster_names("hosts"))
    cfg["emulation"]["boards"]["tb1"]["disk_mb"] = TB1_DISK_MB
    return cfg, up(parse_spec(cfg))


def test_boards_are_hosts_with_disks_of_their_own(hosted, tmp_path: Path) -> None:
    _, state = hosted
    token = uuid.uuid4().hex
    here = Path("/tmp") / f"dse-here-{token}"
    here.write_text("this machine's")
    try:
        for folder in ("/tmp", "/var/tmp", "/root"):
            wrote = ssh(state, "tb0", f"echo tb0 > {folder}/{token} && cat {folder}/{token}")
            assert wrote.stdout == "tb0\n", wrote.stderr
            assert ssh(state, "tb1", f"test -e {folder}/{token}").returncode == 1
            assert not (Path(folder) / token).exists()  # nor on this machine
        assert ssh(state, "tb0", f"test -e {here}").returncode == 1  # this machine's /tmp
    finally:
        here.unlink()
    # each its host name, in its board's cgroups (ssh's sessions, as the launcher's programs),
    # and its sshd on its own address only
    for board in ("tb0", "tb1"):
        seen = ssh(state, board, "hostname; grep -E ':(cpu|memory):' /proc/self/cgroup")
        lines = seen.stdout.split()
        assert lines[0] == board
        assert {line.split(":")[2] for line in lines[1:]} == {f"/dse.{state.name}/{board}"}
        table = subprocess.run(
            ["ip", "netns", "exec", state.names.board_ns(board), "ss", "-Hltn"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        listening = [line.split()[3] for line in table.splitlines()]  # the local address:port
        assert listening == [f"{state.address(board)}:22"]
    # what is installed here stands for what every board has: this Python and dse, read-only
    python = ssh(state, "tb1", f"{sys.executable} -c 'import dse; print(dse.__file__)'")
    assert python.returncode == 0 and python.stdout.strip().endswith("dse/__init__.py")
    ro = ssh(state, "tb1", f"touch {Path(sys.prefix).resolve()}/dse-ro-{token}")
    if str(Path(sys.prefix).resolve()).startswith(("/tmp/", "/var/tmp/", "/root/")):
        assert ro.returncode != 0 and "Read-only file system" in ro.stderr
    # the cluster's keys: files of root's only, and a host key checked
    for f in ssh_dir(state.names).iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    config = ssh_config(state.names).read_text()
    assert "StrictHostKeyChecking yes" in config and "BatchMode yes" in config


def test_exec_runs_a_command_on_a_board_as_ssh_does(hosted) -> None:
    _, state = hosted
    got = run_module("dse.cluster", "exec", "tb1", f"name={state.name}", "--", "hostname")
    assert (got.returncode, got.stdout) == (0, "tb1\n")
    status = run_module("dse.cluster", "exec", "tb0", f"name={state.name}", "--", "exit 7")
    assert status.returncode == 7  # the board's shell read the words, as ssh's does
    none = run_module("dse.cluster", "exec", "tb9", f"name={state.name}", "--", "true")
    assert none.returncode == 2
    assert none.stderr.strip() == (
        f"error: cluster {state.name} has no board 'tb9': python -m dse.cluster status lists them"
    )


def test_a_run_ships_each_board_only_what_its_ranks_read(hosted, tmp_path: Path) -> None:
    cfg, state = hosted
    net = small_net(tmp_path)
    batch = on_devices(net, 3, [[0], [0], [1], [1], [2]])  # tb0, tb1_cpu0, tb1_cpu1
    launcher = launcher_for(cfg)
    out = tmp_path / "small"
    plan = deploy(net, load_platform(cfg), batch, out, warmup=1, iterations=2, launcher=launcher)
    first = launch(out, launcher=launcher)
    assert first.status == "ok", first.reason
    assert first.equivalence is not None and first.equivalence.max_rel_error < 1e-4
    shipped = json.loads((out / SHIPPED).read_text())
    there = shipped["directory"]
    assert there.startswith("/var/tmp/dse/small-")
    expected_files = {  # and rank 0's measurement, which it wrote there
        "tb0": {"plan.json", "expected.npz", *plan.ranks[0].segments, "measurements.json"},
        "tb1": {"plan.json", "expected.npz", *plan.ranks[1].segments, *plan.ranks[2].segments},
    }
    for host in shipped["hosts"]:
        board = host["host"]
        listed = set(ssh(state, board, f"ls {there}").stdout.split())
        data = {f for f in listed if f.endswith(".onnx.data")}
        assert listed - data == expected_files[board]  # its own, and nothing else
        assert (out / "measurements.json").read_text() == ssh(
            state, "tb0", f"cat {there}/measurements.json"
        ).stdout  # fetched here whole
        sizes = ssh(state, board, f"cd {there} && stat -c '%n %s' *").stdout.split("\n")
        on_board = {n: int(s) for n, s in (line.split() for line in sizes if line)}
        on_board.pop("measurements.json", None)
        assert on_board == {n: (out / n).stat().st_size for n in listed - {"measurements.json"}}
        assert host["file_bytes"] == sum(on_board.values())
        assert host["sent_bytes"] == host["file_bytes"]  # the first run sent every byte
    assert not Path(there).exists()  # on the boards, not here
    # the same mapping deployed again: nothing sent, and the run as good
    deploy(net, load_platform(cfg), batch, out, warmup=1, iterations=2, launcher=launcher)
    again = launch(out, launcher=launcher)
    assert again.status == "ok", again.reason
    assert [h["sent_bytes"] for h in json.loads((out / SHIPPED).read_text())["hosts"]] == [0, 0]
    # a board that boots again has lost its disk: the next run sends it everything again
    reboot(state, "tb1")
    assert ssh(state, "tb1", f"test -e {there}").returncode == 1
    third = launch(out, launcher=launcher)
    assert third.status == "ok", third.reason
    sent = {h["host"]: h for h in json.loads((out / SHIPPED).read_text())["hosts"]}
    assert sent["tb0"]["sent_bytes"] == 0
    assert sent["tb1"]["sent_bytes"] == sent["tb1"]["file_bytes"] > 0
    # run.sh ships by itself, then runs the ranks on the boards
    again_by_hand = subprocess.run([str(out / "run.sh"), "--iterations", "1"], capture_output=True,
                                   text=True, timeout=300)  # fmt: skip
    assert again_by_hand.returncode == 0, again_by_hand.stderr
    assert f"tb1: {len(sent['tb1']['files'])} files" in again_by_hand.stdout
    assert left_on_boards(state) == []


def test_a_new_plan_ships_only_what_changed(hosted, tmp_path: Path) -> None:
    """A plan shipped with the one before it as its basis: a board whose sub-model did not
    change is sent none of its bytes, a board whose sub-model changed is sent less than it
    holds; every file on the boards is the new plan's, byte for byte."""
    from dse.runtime.launch.ship import ship

    cfg, state = hosted
    launcher = launcher_for(cfg)
    assert launcher.remote is not None
    net, platform = small_net(tmp_path), load_platform(cfg)
    old, new = tmp_path / "old", tmp_path / "new"
    # conv1 relu1 on tb0 in both; conv2 relu2 conv3 on tb1_cpu0, then conv3 moves to tb1_cpu1
    deploy(net, platform, on_devices(net, 3, [[0], [0], [1], [1], [1]]), old, launcher=launcher)
    plan = deploy(net, platform, on_devices(net, 3, [[0], [0], [1], [1], [2]]), new,
                  launcher=launcher)  # fmt: skip
    ship(old, plan_of(old), launcher.remote, launcher.hosts)
    shipped = ship(new, plan, launcher.remote, launcher.hosts, basis=old)
    by_host = {c.host: c for c in shipped.hosts}
    plan_bytes = (new / "plan.json").stat().st_size  # the one file of tb0's that changed
    assert by_host["tb0"].literal_bytes <= plan_bytes < by_host["tb0"].file_bytes
    # tb1's sub-models changed: sent as their differences from the old ones
    assert 0 < by_host["tb1"].literal_bytes < by_host["tb1"].file_bytes - plan_bytes
    for host, copied in by_host.items():
        sums = ssh(state, host, f"cd {shipped.directory} && md5sum {' '.join(copied.files)}")
        assert sums.returncode == 0, sums.stderr
        for line in sums.stdout.splitlines():
            digest, name = line.split()
            assert digest == hashlib.md5((new / name).read_bytes()).hexdigest(), name
    assert left_on_boards(state) == []


def test_weights_ship_as_their_differences_from_the_staged_whole_model(
    hosted, tmp_path: Path
) -> None:
    """The whole model staged on each board, a plan's weights files go to a fresh folder as
    their differences from it: fewer bytes cross the link than the files hold, and the files
    on the boards are the plan's, byte for byte."""
    from dse.runtime.launch.ship import ship, staged_seed

    cfg, state = hosted
    launcher = launcher_for(cfg)
    assert launcher.remote is not None
    net = small_net(tmp_path)
    out = tmp_path / "seeded"
    plan = deploy(net, load_platform(cfg), on_devices(net, 3, [[0], [1], [1], [2], [2]]), out,
                  launcher=launcher)  # fmt: skip
    assert net.path is not None
    seeds = {h: staged_seed(net.path, launcher.remote, h) for h in ("tb0", "tb1")}
    assert len(set(seeds.values())) == 1  # one path on every board
    shipped = ship(out, plan, launcher.remote, launcher.hosts, seed=seeds["tb0"])
    for copied in shipped.hosts:
        weights = sum((out / n).stat().st_size for n in copied.files if n.endswith(".data"))
        others = copied.file_bytes - weights
        if copied.host == "tb1":  # 27 kB of weights (tb0's 1.7 kB: under rsync's blocks)
            assert weights > 0 and copied.literal_bytes < others + weights / 2, copied
        sums = ssh(state, copied.host, f"cd {shipped.directory} && md5sum {' '.join(copied.files)}")
        for line in sums.stdout.splitlines():
            digest, name = line.split()
            assert digest == hashlib.md5((out / name).read_bytes()).hexdigest(), name
    assert left_on_boards(state) == []


def plan_of(directory: Path):
    from dse.runtime.deployment.reader import read_plan

    return read_plan(directory)


def test_a_board_that_cannot_take_the_deployment_is_one_line(hosted, tmp_path: Path) -> None:
    """A full disk, a host key that changed and an sshd that is down each fail the run in one
    line naming the board and what to check, and leave nothing running on the boards."""

    cfg, state = hosted
    launcher = launcher_for(cfg)
    platform = load_platform(cfg)
    heavy = heavy_net(tmp_path)  # a 94 MiB Gemm on tb1, whose disk holds 64 MB
    out = tmp_path / "heavy"
    deploy(heavy, platform, on_devices(heavy, 3, [[0], [0], [0], [1]]), out, launcher=launcher)
    full = launch(out, launcher=launcher)
    assert full.status == "failed"
    assert full.reason.startswith("copying the deployment to host tb1 failed: its disk is full")
    assert left_on_boards(state) == []
    small = tmp_path / "small"
    net = small_net(tmp_path)
    deploy(net, platform, on_devices(net, 3, [[0], [0], [1], [1], [1]]), small, launcher=launcher)
    known = ssh_dir(state.names) / "known_hosts"
    kept = known.read_text()
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(tmp_path / "other")], check=True)  # fmt: skip
    assert other.returncode == 0
    forged = (tmp_path / "other.pub").read_text().split()[:2]
    lines = [
        f"{line.split()[0]} {' '.join(forged)}" if line.startswith("tb1,") else line
        for line in kept.splitlines()
    ]
    known.write_text("\n".join(lines) + "\n")
    try:
        changed = launch(small, launcher=launcher)
    finally:
        known.write_text(kept)
    assert changed.status == "failed"
    assert changed.reason.startswith(
        "copying the deployment to host tb1 failed: its host key is not the one known"
    )
    sshd = listener(state.names, "tb1")
    assert sshd is not None
    os.kill(sshd, 9)
    try:
        down = launch(small, launcher=launcher)
        assert down.status == "failed"
        assert down.reason.startswith(
            "copying the deployment to host tb1 failed: ssh cannot reach it"
        )
        assert "check that it is on and its sshd runs" in down.reason
    finally:
        reboot(state, "tb1")
    assert launch(small, launcher=launcher).status == "ok"
    assert left_on_boards(state) == []


def in_board(state: State, board: str, *command: str) -> None:
    """``command`` in the board's own mount namespace (through its sshd's), as root there."""
    sshd = listener(state.names, board)
    subprocess.run(["nsenter", "-t", str(sshd), "--mount", *command], check=True, timeout=30)


def test_the_preflight_passes_here_and_names_a_board_without_dse(hosted, tmp_path: Path) -> None:
    """``dse.cluster check`` of the boards as a platform of real boards reaches them (the
    cluster's ssh config in its ``reach:``) and finds them ready; a board whose dse another
    version, or which lacks it, is one line naming it and the fix, and a run there is refused
    before anything is copied."""
    cfg, state = hosted
    boards = {k: v for k, v in cfg.items() if k != "emulation"}
    boards["reach"] = {"ssh": f"ssh -F {ssh_config(state.names)}"}
    launcher = hosts_launcher(boards)  # what dse.cluster check platform=... checks
    assert launcher.remote is not None
    memory = {"tb0": 300.0, "tb1": 1024.0}
    ready = preflight(launcher.remote, memory)
    assert ready.problems == []
    table = format_preflight(ready).splitlines()
    assert table[-1] == "every host is ready"
    rows = {line.split()[0]: line.split() for line in table[2:4]}
    assert rows["tb0"][1:3] == ["tb0", str(state.address("tb0"))]
    assert rows["tb1"][1:3] == ["tb1", str(state.address("tb1"))]
    figures = {f.host: f for f in ready.hosts}
    assert figures["tb1"].area_free_mb == pytest.approx(TB1_DISK_MB, abs=1)  # its own disk
    # another version of dse on tb1: its metadata says 0.0.1 there
    metadata = next(Path(sysconfig.get_paths()["purelib"]).glob("dse-*.dist-info/METADATA"))
    fake = re.sub(r"(?m)^Version: .*$", "Version: 0.0.1", metadata.read_text())
    put = ["ssh", "-F", str(ssh_config(state.names)), "tb1", "cat > /tmp/METADATA"]
    subprocess.run(put, input=fake, text=True, check=True, timeout=30)  # on tb1's own disk
    in_board(state, "tb1", "mount", "--bind", "/tmp/METADATA", str(metadata))
    try:
        other = preflight(launcher.remote, memory)
    finally:
        in_board(state, "tb1", "umount", str(metadata))
    ours = version("dse")
    assert [p.line() for p in other.problems] == [
        f"tb1: it has dse 0.0.1, this machine {ours}: install dse {ours} there"
    ]
    # no dse at all on tb1: a run there stops before it copies anything
    package = Path(dse.__file__).parent
    in_board(state, "tb1", "mount", "-t", "tmpfs", "-o", "size=1m", "no-dse", str(package))
    net = small_net(tmp_path)
    out = tmp_path / "small"
    launcher = launcher_for(cfg)
    deploy(net, load_platform(cfg), on_devices(net, 3, [[0], [0], [1], [1], [1]]), out,
           launcher=launcher)  # fmt: skip
    run = (  # a new process, as a user's command: its first run checks the hosts
        "import json, sys\n"
        "from dse.cluster import launcher_for\n"
        "from dse.runtime.launch.mpiexec import launch\n"
        "cfg = json.loads(sys.argv[1])\n"
        "launch(sys.argv[2], launcher=launcher_for(cfg))\n"
    )
    try:
        refused = subprocess.run([sys.executable, "-c", run, json.dumps(cfg), str(out)],
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        in_board(state, "tb1", "umount", str(package))
    assert refused.returncode != 0
    said = refused.stderr.strip().splitlines()[-1]
    assert re.search(r"DseError: host tb1: it has no dse \(.*\): install dse \S+ in its", said)
    assert not (out / SHIPPED).exists()
    assert launcher.remote is not None
    assert ssh(state, "tb1", f"test -e {launcher.remote.directory(out)}").returncode == 1


def test_a_link_cut_during_a_copy_fails_in_bounded_time_and_leaves_no_half_file(
    hosted, tmp_path: Path
) -> None:
    """tb0's link goes down while a 94 MiB layer is on its way there: the run fails naming tb0
    and its link within ssh's keep-alive (15 s), nothing runs on the boards after, no file of
    the deployment on tb0 is half there under its own name, and once the link is back the next
    run sends what is missing and is right."""

    cfg, state = hosted
    launcher = launcher_for(cfg)
    heavy = heavy_net(tmp_path)
    out = tmp_path / "heavy"
    plan = deploy(heavy, load_platform(cfg), on_devices(heavy, 3, [[1], [1], [1], [0]]), out,
                  warmup=1, iterations=2, launcher=launcher)  # fmt: skip
    result: list = []
    running = threading.Thread(target=lambda: result.append(launch(out, launcher=launcher)))
    started = time.monotonic()
    running.start()
    try:
        while not any(b"rsync" in c and str(out).encode() in c and b"tb0:" in c
                      for c in command_lines()):  # fmt: skip
            assert time.monotonic() - started < 60, "the copy to tb0 never started"
            time.sleep(0.02)
        time.sleep(0.5)  # some of it sent
        set_link(state, "tb0", False)
        cut = time.monotonic()
        running.join(timeout=120)
        took = time.monotonic() - cut
    finally:
        set_link(state, "tb0", True)
    assert not running.is_alive()
    (failed,) = result
    assert failed.status == "failed"
    assert failed.reason.startswith("board tb0's link is down; copying the deployment to host tb0")
    assert took < 30
    assert left_on_boards(state) == []
    there = launcher.remote.directory(out)
    listed = ssh(state, "tb0", f"cd {there} 2>/dev/null && stat -c '%n %s' *").stdout.split("\n")
    for name, size in (line.split() for line in listed if line):
        assert int(size) == (out / name).stat().st_size, name  # whole, or not there by its name
    again = launch(out, launcher=launcher)
    assert again.status == "ok", again.reason
    assert again.equivalence is not None and again.equivalence.max_rel_error < 1e-4
    gemm = next(s for s in plan.ranks[0].segments if (out / f"{s}.data").exists())
    assert ssh(state, "tb0", f"stat -c %s {there}/{gemm}.data").stdout.strip() == str(
        (out / f"{gemm}.data").stat().st_size
    )


def command_lines() -> list[bytes]:
    """Every process's command line on this machine."""
    found = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            found.append(p.read_bytes().replace(b"\0", b" "))
    return found
