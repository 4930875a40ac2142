"""dse.cluster.live and `python -m dse.cluster set`: a running cluster's port rates and CPU
shares changed while ranks run on it; the kernel's objects, a running paced process and the
self-check follow, and bad input changes nothing."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dse.cluster import (
    CheckSettings,
    check,
    command,
    down,
    launcher_for,
    load,
    parse_spec,
    set_rate,
    set_share,
    up,
)
from dse.cluster import live as live_module
from dse.cluster.names import CGROUP_ROOT
from dse.cluster.spec import with_rate, with_share
from dse.cluster.state import State
from dse.errors import DseError
from tests.helpers.cli import ROOT, run_module
from tests.helpers.cluster import make_platform, wait_on_board

QUICK = CheckSettings(size_mb=1.0, reps=3, rounds=3, chunk_ms=50)


# --- the new figures, checked as up checks them (no root needed) ------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: with_rate(s, "tb9", 50),
         "cluster x has no board 'tb9' (its boards: tb0, tb1)"),
        (lambda s: with_rate(s, "tb1", 0),
         "cluster x: rate_mbit: 0 is out of range: expected above 0"),
        (lambda s: with_rate(s, None, 50),
         "cluster x is switched: each port has its own rate: name its board (board=, one of tb0, "
         "tb1)"),
        (lambda s: with_share(s, "tb9_cpu", 0.5),
         "cluster x has no device 'tb9_cpu' (its devices: tb0_cpu, tb1_cpu0, tb1_cpu1)"),
        (lambda s: with_share(s, "tb1_cpu0", 0),
         "cluster x: tb1_cpu0.share: 0 is out of range: expected above 0"),
        (lambda s: with_share(s, "tb1_cpu0", 0.7),
         "cluster x: CPU 1 is oversubscribed: its devices ask for 1.1 of it (tb1_cpu0 0.7, "
         "tb1_cpu1 0.4); lower their shares"),
    ],
)  # fmt: skip
def test_a_bad_change_is_one_line(change, message: str) -> None:
    spec = parse_spec(make_platform(), name="x", available=[0, 1])
    with pytest.raises(DseError) as err:
        change(spec)
    assert str(err.value) == message


def test_changes_as_up_would_check_them() -> None:
    spec = parse_spec(make_platform(), name="x", available=[0, 1])
    assert [b.rate_mbit for b in with_rate(spec, "tb1", 50).boards] == [200.0, 50.0]
    assert [d.share for d in with_share(spec, "tb1_cpu1", 0.2).devices] == [1.0, 0.6, 0.2]
    quota = parse_spec(make_platform(), name="x", available=[0, 1], cpu_share="quota")
    with pytest.raises(DseError) as err:  # 0.05 x 1 CPU x 10 ms: 500 us
        with_share(quota, "tb1_cpu1", 0.05)
    assert str(err.value) == (
        "cluster x: tb1_cpu1: a share of 0.05 is a CFS quota of 500 us per 10000 us period, "
        "under the kernel's 1 ms minimum: raise the share or cfs_period_us, or use "
        "cpu_share=weight"
    )
    shared = parse_spec(make_platform(network="shared"), name="x", available=[0, 1])
    medium = with_rate(shared, None, 50)
    assert medium.rate_mbit == 50 and [b.rate_mbit for b in medium.boards] == [50.0, 50.0]
    with pytest.raises(DseError) as err:
        with_rate(shared, "tb1", 50)
    assert str(err.value) == (
        "cluster x is one shared medium: its boards talk at the medium's rate, not one of their "
        "own: leave out the board to set the medium's rate"
    )


# --- a running cluster (root, namespaces, tc, cgroup v1) ---------------------------------------


@pytest.fixture(scope="module")
def cluster(cluster_names) -> State:
    """Two boards (ports of 200 and 100 Mbit/s; tb0 a whole CPU, tb1 0.6 / 0.4 of another),
    CPU shares by weights (the default)."""
    return up(parse_spec(make_platform(), name=cluster_names("live")))


def _qdisc(ns: str, dev: str) -> str:
    cmd = ["tc", "-n", ns, "qdisc", "show", "dev", dev]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _rates(result: dict) -> tuple[float, float]:
    (row,) = result["links"]
    return row["configured_mbit"], row["best_mbit"]


def test_a_port_and_a_share_set_live_and_the_check_measures_them(cluster: State) -> None:
    """tb1's port from 100 to 50 Mbit/s, both directions, and tb1_cpu1's share from 0.4 to
    0.2: the kernel's objects, the saved state and the self-check follow; set back, they
    recover."""
    names = cluster.names
    slow = set_rate(cluster, "tb1", 50)
    assert "rate 50Mbit" in _qdisc(names.board_ns("tb1"), "eth0")  # what tb1 sends
    assert "rate 50Mbit" in _qdisc(names.switch_ns, "p1")  # what it receives
    assert "rate 200Mbit" in _qdisc(names.switch_ns, "p0")  # tb0's port as it was
    slow = set_share(slow, "tb1_cpu1", 0.2)
    group = CGROUP_ROOT / "cpu" / f"dse.{cluster.name}" / "tb1"
    assert (group / "tb1_cpu1" / "cpu.shares").read_text().strip() == str(round(0.2 * 1024))
    assert (group / "cpu.shares").read_text().strip() == str(round(0.8 * 1024))  # 0.6 + 0.2
    assert (names.state_dir / "pace" / "tb1_cpu1").read_text() == "0.2\n"
    assert load(cluster.name) == slow  # what status and check read
    assert [b.rate_mbit for b in slow.spec.boards] == [200.0, 50.0]
    result = check(slow, QUICK)
    assert result["errors"] == []  # within 10 % of 50 Mbit/s, and each direction its own
    configured, best = _rates(result)
    assert configured == 50.0 and 45.0 <= best <= 55.0
    speeds = {d["device"]: (d["expected"], d["speed"]) for d in result["devices"]}
    assert speeds["tb1_cpu1"][0] == 0.2 and 0.16 <= speeds["tb1_cpu1"][1] <= 0.23
    back = set_share(set_rate(slow, "tb1", 100), "tb1_cpu1", 0.4)
    assert back.spec == cluster.spec and load(cluster.name) == back
    result = check(back, QUICK)
    configured, best = _rates(result)
    assert result["errors"] == [] and configured == 100.0 and 90.0 <= best <= 110.0


PACED = textwrap.dedent(
    """
    import sys, time
    from dse.runtime.rank.pace import pace_from_env
    pace = pace_from_env()
    print("following", pace.source is not None, pace.speed, flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while time.process_time() - cpu0 < 0.01:  # 10 ms of work, paced as a run is
            pass
        work = time.process_time() - cpu0
        pace.until(wall0, cpu0)
        print(f"{time.time():.4f} {work / (time.perf_counter() - wall0):.3f}", flush=True)
    """
)


def test_a_running_process_follows_its_devices_new_share(cluster: State, tmp_path: Path) -> None:
    """A process on tb0's whole-CPU device, started before any change, computes at a whole
    CPU, at 0.5 from a quarter second after its share is halved, and at a whole CPU again once
    it is restored."""
    out = tmp_path / "out"
    cmd = [str(cluster.launcher), "--in", "tb0/tb0_cpu", sys.executable, "-c", PACED, "3.5"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(out, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        wait_on_board(cluster, proc, "tb0")
        time.sleep(1.0)
        halved = time.time()
        state = set_share(cluster, "tb0_cpu", 0.5)
        time.sleep(1.2)
        whole = time.time()
        set_share(state, "tb0_cpu", 1.0)
        assert proc.wait(timeout=30) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    first, *lines = out.read_text().splitlines()
    assert first == "following True None"  # a whole CPU: its pace file says none
    chunks = [(float(t), float(s)) for t, s in (ln.split() for ln in lines)]

    def speed(lo: float, hi: float) -> float:
        return statistics.median(s for t, s in chunks if lo <= t < hi)

    lag = 0.35  # the pace file is looked at every 0.25 s; a chunk lasts 10-20 ms
    assert speed(0, halved) > 0.8
    assert 0.4 <= speed(halved + lag, whole) <= 0.51
    assert speed(whole + lag, float("inf")) > 0.8


def test_cli_set_and_its_bad_input(cluster: State) -> None:
    """One line saying what changed, status with the new figures; bad input: one line, exit 2,
    nothing changed."""
    name = cluster.name
    state_file = cluster.names.state_dir / "state.json"
    proc = run_module("dse.cluster", "set", f"name={name}", "board=tb1", "rate_mbit=50")
    assert (proc.returncode, proc.stdout) == (0, f"cluster {name}: tb1's port 100 -> 50 Mbit/s\n")
    status = run_module("dse.cluster", "status", f"name={name}").stdout.splitlines()
    assert status[2].endswith(", 50 Mbit/s port, 4096 MB disk; tb1_cpu0 (share 0.6, 512 MB), "
                              "tb1_cpu1 (share 0.4, 512 MB)")  # fmt: skip
    assert status[3] == "no self-check yet: run check"  # the last one measured 100 Mbit/s
    proc = run_module("dse.cluster", "set", f"name={name}", "device=tb1_cpu0", "share=0.5")
    assert proc.stdout == f"cluster {name}: tb1_cpu0's share 0.6 -> 0.5 of tb1's CPUs\n"
    saved = state_file.read_bytes()
    one = "set takes either rate_mbit=R (with board=B on a switched network) or device=D share=S"
    one += ": one change at a time"
    cases = [
        (["board=tb9", "rate_mbit=50"],
         f"cluster {name} has no board 'tb9' (its boards: tb0, tb1)"),
        (["device=tb9_cpu", "share=0.5"],
         f"cluster {name} has no device 'tb9_cpu' (its devices: tb0_cpu, tb1_cpu0, tb1_cpu1)"),
        (["board=tb1", "rate_mbit=50", "device=tb1_cpu0", "share=0.5"], one),
        ([], one),
        (["device=tb1_cpu0", "share=0.7"],
         f"cluster {name}: CPU 1 is oversubscribed: its devices ask for 1.1 of it (tb1_cpu0 0.7, "
         "tb1_cpu1 0.4); lower their shares"),
    ]  # fmt: skip
    for args, message in cases:
        proc = run_module("dse.cluster", "set", f"name={name}", *args)
        assert (proc.returncode, proc.stderr) == (2, f"error: {message}\n"), args
        assert state_file.read_bytes() == saved, args
    proc = run_module("dse.cluster", "check", f"name={name}", "share=0.5")
    assert proc.stderr == "error: share= is for set only: python -m dse.cluster set ... share=...\n"
    set_share(set_rate(cluster, "tb1", 100), "tb1_cpu0", 0.6)
    assert load(name).spec == cluster.spec


def test_a_new_rank_gets_the_new_speed(cluster: State, tmp_path: Path) -> None:
    """A rank started after a change gets its device's new speed and its pace file's path
    from the rank script; a whole CPU gets no speed, and its file says none."""
    program = (
        "import os; f = os.environ.get('DSE_PACE_FILE');"
        "print('rank', os.environ.get('DSE_PACE'), f and open(f).read().strip(), flush=True)"
    )
    state = set_share(cluster, "tb1_cpu1", 0.2)
    try:
        cmd, env = command(
            state, ["tb0_cpu", "tb1_cpu1"], tmp_path, [sys.executable, "-c", program]
        )
        ran = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    finally:
        set_share(state, "tb1_cpu1", 0.4)
    said = sorted(ln for ln in ran.stdout.splitlines() if ln.startswith("rank "))
    assert said == ["rank 0.2 0.2", "rank None none"], ran.stderr


def test_a_change_that_fails_midway_is_undone(
    cluster: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tc refusing the switch's side of tb1's port (simulated): tb1's own side is shaped back
    to its rate, and the state is as it was."""
    shape = live_module.net.shape

    def refuse_the_switch(dev: str, ns: str, rate_mbit: float) -> None:
        if dev == "p1" and rate_mbit == 50:
            raise DseError("tc refused (simulated)")
        shape(dev, ns, rate_mbit)

    monkeypatch.setattr(live_module.net, "shape", refuse_the_switch)
    saved = (cluster.names.state_dir / "state.json").read_bytes()
    with pytest.raises(DseError, match=r"^tc refused \(simulated\)$"):
        set_rate(cluster, "tb1", 50)
    assert "rate 100Mbit" in _qdisc(cluster.names.board_ns("tb1"), "eth0")
    assert (cluster.names.state_dir / "state.json").read_bytes() == saved


def test_a_shared_medium_and_quotas_set_live(cluster_names) -> None:
    """On a shared medium the rate is the medium's: its token bucket (the ifb device), every
    board's GSO size, and the check follow; under quotas a share is the device's CFS quota,
    and no rank is paced (no pace file)."""
    spec = parse_spec(make_platform(network="shared"), name=cluster_names("air"), cpu_share="quota")
    state = up(spec)
    slow = set_rate(state, None, 50)
    assert "rate 50Mbit" in _qdisc(state.names.switch_ns, "air")
    assert slow.spec.rate_mbit == 50 and [b.rate_mbit for b in slow.spec.boards] == [50.0, 50.0]
    slow = set_share(slow, "tb1_cpu1", 0.2)
    group = CGROUP_ROOT / "cpu" / f"dse.{spec.name}" / "tb1" / "tb1_cpu1"
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "2000"  # 0.2 x 1 CPU x 10 ms
    assert not (state.names.state_dir / "pace").exists()
    result = check(slow, CheckSettings(size_mb=0.5, reps=3, rounds=1, chunk_ms=20))
    configured, best = _rates(result)
    assert result["errors"] == [] and configured == 50.0 and 45.0 <= best <= 55.0
    with pytest.raises(DseError, match="is one shared medium"):
        set_rate(slow, "tb1", 50)
    down(state.name)


def test_a_cluster_changed_live_is_still_its_platforms(cluster_names) -> None:
    """After a port's rate and a share are set, runs on the platform still start there (on
    the figures set); a platform that differs in what set cannot change is refused."""
    cfg = make_platform(cluster_names("asbuilt"))
    state = set_share(set_rate(up(parse_spec(cfg)), "tb1", 50), "tb1_cpu1", 0.2)
    launcher = launcher_for(cfg)
    assert launcher.remote is not None and launcher.head == str(state.head)
    other = make_platform(state.name)
    other["emulation"]["boards"]["tb1"]["disk_mb"] = 512
    with pytest.raises(DseError, match="runs another version of its platform"):
        launcher_for(other)
    # a rate edited in the platform file is not a live change: the cluster runs another
    edited = make_platform(state.name)
    edited["emulation"]["boards"]["tb1"]["rate_mbit"] = 50
    with pytest.raises(DseError, match="runs another version of its platform"):
        launcher_for(edited)
