"""dse.cluster: the emulated cluster's spec, names and MPI files, and (as root) real clusters.

The tests that build clusters need root, network namespaces, tc and cgroup v1; elsewhere they
skip, saying what is missing. Every cluster they make has a name unique to this run
(``dsetest-<pid>-...``) and is taken down by a fixture's finalizer, also when the test fails; a
run killed before its finalizers leaves clusters the next run removes (their pid is gone).
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dse.cluster import (
    CheckSettings,
    check,
    command,
    down,
    leftovers,
    load,
    missing,
    mpiexec_options,
    oom_kills,
    parse_spec,
    peak_memory_mb,
    rank_prefix,
    set_link,
    set_share,
    stop_processes,
    up,
    write_mpi_files,
)
from dse.cluster import build as build_module
from dse.cluster.check import exchange_ok, format_check, run_mpi, summarise
from dse.cluster.cpu import CoGroup, corunner_groups, pace_speed, tasks
from dse.cluster.hosts import listener, ssh_command
from dse.cluster.names import CGROUP_ROOT, CONTROLLERS, Names
from dse.cluster.net import bucket
from dse.cluster.state import State
from dse.cluster.system import require
from dse.errors import DseError
from tests.helpers.cli import run_module
from tests.helpers.cluster import TWO_CPUS, make_platform, platform_yaml, wait_on_board

# --- the spec: parsed by hand-checked rules (no root needed) --------------------------------


def test_edge3_platforms_parse_to_the_documented_clusters() -> None:
    eth = parse_spec(platform_yaml("edge3_ethernet"), available=[0, 1])
    wifi = parse_spec(platform_yaml("edge3_wifi"), available=[0, 1])
    assert eth.name == "edge3_ethernet" and eth.network == "switched"
    assert [(b.name, b.cpus, b.rate_mbit) for b in eth.boards] == [
        ("edge0", (0,), 1000.0),
        ("edge1", (1,), 1000.0),
    ]
    assert [(d.name, d.board, d.share, d.memory_mb) for d in eth.devices] == [
        ("edge0_cpu", "edge0", 1.0, 1536.0),
        ("edge1_cpu0", "edge1", 0.6, 1024.0),
        ("edge1_cpu1", "edge1", 0.4, 512.0),
    ]
    # CFS quota = share x board CPUs x period: 1.0 x 1 x 10 ms, 0.6 x ..., 0.4 x ...
    assert [eth.quota_us(d) for d in eth.devices] == [10_000, 6_000, 4_000]
    assert eth.pair_rate_mbit("edge0", "edge1") == 1000.0
    assert wifi.network == "shared" and wifi.rate_mbit == 100.0
    assert [d.share for d in wifi.devices] == [1.0, 0.6, 0.4]
    # VGG-16 whole: a cgroup peak of ~1.2 GB with its weights' page cache, ~0.7 GB without
    assert [d.memory_mb >= 1200 for d in eth.devices] == [True, False, False]
    assert [d.memory_mb >= 700 for d in eth.devices] == [True, True, False]


def test_spec_defaults_and_per_board_rates() -> None:
    cfg = make_platform()
    del cfg["emulation"]["devices"]
    spec = parse_spec(cfg, name="x", cfs_period_us=20_000, available=[0, 1])
    assert [d.share for d in spec.devices] == [1.0, 0.5, 0.5]  # an equal split of each board
    assert spec.quota_us(spec.device("tb1_cpu0")) == 10_000  # 0.5 x 1 CPU x 20 ms
    assert spec.pair_rate_mbit("tb0", "tb1") == 100.0  # the slower port
    two = make_platform()
    two["emulation"]["boards"]["tb0"]["cpus"] = [0, 1]
    two["emulation"]["devices"] = {"tb1_cpu0": {"share": 0.5}, "tb1_cpu1": {"share": 0.5}}
    two["emulation"]["boards"]["tb1"]["cpus"] = [2]
    spec = parse_spec(two, available=[0, 1, 2])
    assert spec.quota_us(spec.device("tb0_cpu")) == 20_000  # 1.0 x 2 CPUs x 10 ms
    assert spec.board("tb0").cpus == (0, 1)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda e: e["boards"].update(nosuch={"cpus": [0]}), "'nosuch' is not a host"),
        (lambda e: e["boards"].pop("tb1"), "no board for host 'tb1'"),
        (lambda e: e["devices"]["tb1_cpu0"].update(share=1.5), "share: 1.5 is out of range"),
        (lambda e: e["devices"].update(tb9_cpu={"share": 0.1}), "tb9_cpu is not a device"),
        (lambda e: e["boards"]["tb1"].update(cpus=[7]), "CPU 7, which this machine lacks"),
        (lambda e: e.update(rate_mbit=0), "emulation.rate_mbit: 0 is out of range"),
        (lambda e: e["boards"]["tb1"].update(rate_mbit=0), "tb1.rate_mbit: 0 is out of range"),
        (lambda e: e["devices"]["tb1_cpu1"].update(share=0.5), "CPU 1 is oversubscribed"),
        (lambda e: e.update(network="token-ring"), "expected switched or shared"),
        (lambda e: e.update(speed=3), "emulation: unknown key 'speed'"),
        (lambda e: e.pop("rate_mbit"), "emulation: 'rate_mbit' is missing"),
        (lambda e: e["boards"]["tb0"].update(cpu=[0]), "unknown key 'cpu' (did you mean 'cpus'?)"),
        (lambda e: e["boards"]["tb0"].update(cpus="0"), "tb0.cpus: expected a list, not text"),
        (lambda e: e["boards"]["tb0"].update(cpus=[True]), "cpus[0]: expected an integer"),
        (lambda e: e["boards"]["tb0"].update(cpus=[0, 0]), "each once"),
    ],
)
def test_bad_emulation_is_one_line(edit, needle: str) -> None:
    cfg = make_platform()
    edit(cfg["emulation"])
    with pytest.raises(DseError) as err:
        parse_spec(cfg, available=[0, 1])
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_a_quota_under_the_kernels_minimum_is_one_line() -> None:
    cfg = make_platform()
    cfg["emulation"]["devices"]["tb1_cpu1"]["share"] = 0.05  # 0.5 ms of every 10 ms
    with pytest.raises(DseError, match=r"under the kernel's 1 ms minimum.*cpu_share=weight$"):
        parse_spec(cfg, available=[0, 1], cpu_share="quota")
    spec = parse_spec(cfg, available=[0, 1])  # weights, the default: no minimum
    assert spec.cpu_share == "weight" and spec.device("tb1_cpu1").share == 0.05
    with pytest.raises(DseError, match="cpu_share='nice' must be weight, corunner, quota$"):
        parse_spec(cfg, available=[0, 1], cpu_share="nice")


def test_corunner_groups_fill_each_cpu_to_its_devices_shares() -> None:
    """Co-runners keep every device of a share below 1 ready to run (on its board's CPUs, at
    the least weight) and take each CPU's unused share (at that share's weight); a whole-CPU
    device needs none, and quotas none at all."""
    spec = parse_spec(make_platform(), name="x", available=[0, 1], cpu_share="corunner")
    assert corunner_groups(spec, "tb0") == []
    assert corunner_groups(spec, "tb1") == [
        CoGroup(("tb1", "tb1_cpu0", "corunner"), 2, (1,)),
        CoGroup(("tb1", "tb1_cpu1", "corunner"), 2, (1,)),
    ]
    assert corunner_groups(replace(spec, cpu_share="quota"), "tb1") == []
    half = make_platform()  # tb1 uses 0.3 + 0.2 of CPU 1: the rest, 0.5, is 512 of 1024
    half["emulation"]["devices"].update(tb1_cpu0={"share": 0.3}, tb1_cpu1={"share": 0.2})
    half["emulation"]["boards"]["tb1"]["cpus"] = [1, 2]
    spec = parse_spec(half, name="x", available=[0, 1, 2], cpu_share="corunner")
    assert corunner_groups(spec, "tb1") == [
        CoGroup(("tb1", "tb1_cpu0", "corunner"), 2, (1, 2)),
        CoGroup(("tb1", "tb1_cpu1", "corunner"), 2, (1, 2)),
        CoGroup(("rest_cpu1",), 512, (1,)),
        CoGroup(("rest_cpu2",), 512, (2,)),
    ]
    # a thread of a device gets its share of a CPU under co-runners, of the board under quotas
    # and weights (paced to it: a process of a 0.3 share of two CPUs computes 0.6 of one)
    assert spec.thread_speed(spec.device("tb1_cpu0")) == 0.3
    assert replace(spec, cpu_share="quota").thread_speed(spec.device("tb1_cpu0")) == 0.6
    weighted = replace(spec, cpu_share="weight")
    assert corunner_groups(weighted, "tb1") == []
    assert weighted.thread_speed(spec.device("tb1_cpu0")) == 0.6
    assert pace_speed(weighted, "tb1_cpu0") == pytest.approx(0.6)
    assert pace_speed(replace(spec, cpu_share="quota"), "tb1_cpu0") is None


def test_bad_platform_level_input_is_one_line() -> None:
    cfg = make_platform()
    del cfg["emulation"]
    with pytest.raises(DseError, match="has no emulation: section"):
        parse_spec(cfg, available=[0, 1])
    cfg = make_platform(network="shared")
    cfg["shared_network"] = False
    with pytest.raises(DseError, match="emulation.network is shared but shared_network is false"):
        parse_spec(cfg, available=[0, 1])
    cfg = make_platform(network="shared")
    cfg["emulation"]["boards"]["tb0"]["rate_mbit"] = 50
    with pytest.raises(DseError, match="on a shared medium every board talks at the medium's"):
        parse_spec(cfg, available=[0, 1])
    with pytest.raises(DseError, match="cluster name 'a.b' is not usable"):
        parse_spec(make_platform(), name="a.b", available=[0, 1])
    for name in ("../etc", "a/b", "", "x" * 41):  # a name becomes paths: refused before any
        with pytest.raises(DseError, match="is not usable"):
            leftovers(name)
    cfg = make_platform()
    cfg["devices"][0]["host"] = cfg["devices"][0]["name"] = "tb_0"
    cfg["emulation"]["boards"]["tb_0"] = cfg["emulation"]["boards"].pop("tb0")
    cfg["emulation"]["devices"].pop("tb0_cpu")
    with pytest.raises(DseError, match="host 'tb_0' cannot name a board"):
        parse_spec(cfg, available=[0, 1])
    with pytest.raises(DseError, match="cfs_period_us=500 must be from 1000"):
        parse_spec(make_platform(), cfs_period_us=500, available=[0, 1])


def test_a_board_named_like_this_machine_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_module, "local_names", lambda: {"localhost", "tb1"})
    spec = parse_spec(make_platform(), available=[0, 1])
    with pytest.raises(DseError, match="host 'tb1' is a name of this machine"):
        build_module.check_board_names(spec)


def test_missing_root_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert any(m.startswith("root") for m in missing())
    with pytest.raises(DseError, match="cannot emulate a cluster on this machine: it lacks root"):
        require()


# --- names, token buckets, MPI files and the check's arithmetic (no root needed) ---------------


def test_names_fit_the_kernel_and_separate_clusters() -> None:
    a, b = Names("edge3_ethernet"), Names("edge3_wifi")
    assert len(a.head_link) <= 15 and a.head_link != b.head_link
    assert a.switch_ns == "dse.edge3_ethernet" and a.board_ns("edge0") == "dse.edge3_ethernet.edge0"
    assert a.owns_namespace("dse.edge3_ethernet.edge0") and not a.owns_namespace("dse.edge3_wifi")
    assert not Names("edge3").owns_namespace("dse.edge3_ethernet")
    pool = ipaddress.IPv4Network("198.18.0.0/15")
    first = next(a.subnets())
    assert first.subnet_of(pool) and first.prefixlen == 24
    assert len(set(a.subnets())) == 512  # every /24 of the pool, each once
    assert a.cgroup("cpu", "edge0", "edge0_cpu") == Path(
        "/sys/fs/cgroup/cpu/dse.edge3_ethernet/edge0/edge0_cpu"
    )


def test_token_buckets() -> None:
    # 1000 Mbit/s = 125 MB/s: 0.5 ms is 62500 B, a quarter of it 15625, 20 ms 2.5 MB
    assert bucket(1000) == (62_500, 2_500_000, 15_625)
    # 100 Mbit/s: 0.5 ms is 6250 B (more than four frames, 6056), GSO a quarter: 1562
    assert bucket(100) == (6_250, 250_000, 1_562)
    # 1 Mbit/s: four frames at least, a limit of four bursts, GSO one frame
    assert bucket(1) == (6_056, 24_224, 1_514)


def edge3_state() -> State:
    spec = parse_spec(platform_yaml("edge3_ethernet"), available=[0, 1])
    return State(spec, ipaddress.IPv4Network("198.18.7.0/24"))


def test_mpi_files_name_the_boards(tmp_path: Path) -> None:
    state = edge3_state()
    devices = ["edge1_cpu1", "edge0_cpu", "edge1_cpu0"]
    files = write_mpi_files(state, devices, tmp_path)
    assert files.hostfile.read_text() == "edge1 slots=2\nedge0 slots=1\n"
    assert files.rankfile.read_text() == (
        "rank 0=edge1 slot=0\nrank 1=edge0 slot=0\nrank 2=edge1 slot=0\n"
    )
    assert files.args() == [
        "--hostfile",
        str(tmp_path / "hostfile"),
        "--map-by",
        f"rankfile:file={tmp_path / 'rankfile'}:oversubscribe",
    ]
    assert rank_prefix(state, devices) == [
        "/run/dse-cluster/edge3_ethernet/rank",
        "edge1/edge1_cpu1,edge0/edge0_cpu,edge1/edge1_cpu0",
    ]
    args, env = mpiexec_options(state)
    ssh = shutil.which("ssh") or "ssh"
    assert ssh_command(state.names) == (ssh, "-F", "/run/dse-cluster/edge3_ethernet/ssh/config")
    assert args == [
        "--prtemca", "plm_ssh_args", "-F /run/dse-cluster/edge3_ethernet/ssh/config",
        "--prtemca", "plm_ssh_no_tree_spawn", "1",
        "--prtemca", "oob_tcp_if_include", "198.18.7.0/24",
        "--mca", "btl_tcp_if_include", "198.18.7.0/24",
    ]  # fmt: skip
    corunners = State(replace(state.spec, cpu_share="corunner"), state.subnet)
    assert mpiexec_options(corunners)[0][:3] == [
        "--prtemca", "plm_ssh_agent", "/run/dse-cluster/edge3_ethernet/launcher"
    ]  # fmt: skip
    assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"
    with pytest.raises(DseError, match="has no device 'edge2_cpu'"):
        write_mpi_files(state, ["edge2_cpu"], tmp_path)


def test_summary_flags_links_off_their_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    state = edge3_state()
    size = 1_000_000  # bytes; 8 ms one way = 1000 Mbit/s, 10 ms = 800
    pair = {
        "a": "edge0",
        "b": "edge1",
        "latency_s": [2e-5, 3e-5, 4e-5],
        "one_way_s": [0.0105, 0.00842, 0.0110],  # at best 950 Mbit/s: -5 %
        "exchange_s": [0.0100, 0.0120],  # 2 MB in 10 ms: 1600 Mbit/s both ways
    }
    # the kernel takes 0.05 s of CPU; edge1's board got half its CPU, its devices their shares
    compute = {
        "edge0": {"cpu_s": {"edge0": [0.05, 0.05], "edge0_cpu": [0.05, 0.05]},
                  "wall_s": {"edge0": [0.05, 0.05], "edge0_cpu": [0.05, 0.05]}},
        "edge1": {"cpu_s": {"edge1": [0.05, 0.05], "edge1_cpu0": [0.05, 0.05],
                            "edge1_cpu1": [0.05, 0.05]},
                  "wall_s": {"edge1": [0.1, 0.1], "edge1_cpu0": [0.0833, 0.0834],
                             "edge1_cpu1": [0.125, 0.125]}},
    }  # fmt: skip
    links = {"size": size, "hosts": ["edge0", "edge1"], "pairs": [pair]}
    good = summarise(state, links, compute, CheckSettings())
    row = good["links"][0]
    assert row["best_mbit"] == pytest.approx(1e6 * 8 / 0.00842 / 1e6)
    assert row["off_pct"] == pytest.approx(100 * (8 / 8.42 - 1))
    assert row["latency_us"] == pytest.approx(30.0)
    assert row["exchange_best_mbit"] == pytest.approx(1600.0)
    assert good["errors"] == []
    speeds = {d["device"]: round(d["speed"], 2) for d in good["devices"]}
    assert speeds == {"edge0_cpu": 1.0, "edge1_cpu0": 0.6, "edge1_cpu1": 0.4}
    assert good["devices"][1]["board_free"] == pytest.approx(0.5)
    assert good["devices"][2]["cpu_got"] == pytest.approx(0.4)
    slow = summarise(state, {**links, "pairs": [{**pair, "one_way_s": [0.0095]}]}, compute,
                     CheckSettings())  # fmt: skip
    assert len(slow["errors"]) == 1  # 842 Mbit/s: -15.8 %
    assert slow["errors"][0].startswith("link edge0<->edge1 moved 842 Mbit/s at best")
    # a link off its rate is measured once more, after the devices; the best of both counts
    slow_links = {**links, "pairs": [{**pair, "one_way_s": [0.0095]}]}
    rounds = iter([slow_links, links])
    check_mod = importlib.import_module("dse.cluster.check")  # the package exports check()
    monkeypatch.setattr(check_mod, "run_links", lambda *_: next(rounds))
    monkeypatch.setattr(check_mod, "run_compute", lambda *_: compute)
    monkeypatch.setattr(check_mod.system, "require", lambda: None)
    monkeypatch.setattr(check_mod, "one_run", lambda _: contextlib.nullcontext())
    again = check_mod.check(state, CheckSettings())
    assert again["errors"] == [] and again["links"][0]["reps"] == 4  # 1 then 3
    assert again["links"][0]["best_mbit"] == pytest.approx(1e6 * 8 / 0.00842 / 1e6)
    assert "best (and median) of 10 (measured again: a link missed its rate)" in format_check(again)
    assert "best (and median) of 5;" in format_check(good)
    rounds = iter([links])  # within its rate: measured once
    assert check_mod.check(state, CheckSettings())["links"][0]["reps"] == 3
    # both ways at once: a switch gives clearly more than one direction, a medium its rate
    assert exchange_ok("switched", 1000, 1600, 0.1) and not exchange_ok("switched", 1000, 1050, 0.1)
    assert exchange_ok("shared", 100, 95, 0.1) and not exchange_ok("shared", 100, 180, 0.1)


# --- real clusters (root, namespaces, tc, cgroup v1) ---------------------------------------


def test_the_link_check_starts_mpiexec_again_after_a_startup_failure(tmp_path: Path) -> None:
    """Open MPI's PMIx listener failing at startup: started again (at most 3 launches); any
    other failure, or the third startup failure, is one line with mpiexec's last lines."""
    count = tmp_path / "launches"

    def fake(failures: int, other: str = "") -> list[str]:
        script = tmp_path / "fake-mpiexec"
        script.write_text(
            f"#!/bin/sh\nn=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
            f"{other}"
            f'[ "$n" -lt {failures} ] || exit 0\n'
            'echo "The PMIx server\'s listener thread failed to start. We cannot"; '
            "echo continue.; exit 213\n"
        )
        script.chmod(0o755)
        count.unlink(missing_ok=True)
        return [str(script)]

    run_mpi(fake(2), dict(os.environ), 10, tmp_path)
    assert count.read_text().strip() == "3"
    with pytest.raises(DseError, match=r"exited with 213: The PMIx .* cannot \| continue\.$"):
        run_mpi(fake(3), dict(os.environ), 10, tmp_path)
    assert count.read_text().strip() == "3"
    with pytest.raises(DseError, match=r"^the link check's mpiexec exited with 7: no route$"):
        run_mpi(fake(0, other="echo no route; exit 7\n"), dict(os.environ), 10, tmp_path)
    assert count.read_text().strip() == "1"


@pytest.fixture(scope="module")
def cluster(cluster_names) -> State:
    """A two-board switched cluster (ports of 200 and 100 Mbit/s), up for the module, its CPU
    shares by co-runners (a test below builds one by weights, the default; the CLI's test one
    with quotas)."""
    return up(parse_spec(make_platform(), name=cluster_names("main"), cpu_share="corunner"))


def _root_view(name: str) -> dict[str, object]:
    """What `ip`, `tc`, the cgroup tree and /etc/hosts show of a cluster: read without dse's
    own code."""
    names = Names(name)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    return {
        "namespaces": [ln.split()[0] for ln in netns.splitlines() if f"dse.{name}" in ln],
        "links": [ln for ln in links.splitlines() if names.head_link in ln],
        "qdiscs": [ln for ln in qdiscs.splitlines() if names.head_link in ln],
        "cgroups": [c for c in CONTROLLERS if (CGROUP_ROOT / c / f"dse.{name}").exists()],
        "state": names.state_dir.exists(),
    }


def test_cluster_is_built_as_specified(cluster: State) -> None:
    names, spec = cluster.names, cluster.spec
    view = _root_view(cluster.name)
    assert sorted(view["namespaces"]) == sorted(
        [names.switch_ns, names.board_ns("tb0"), names.board_ns("tb1")]
    )
    assert len(view["links"]) == 1 and view["cgroups"] == list(CONTROLLERS)
    qdiscs = subprocess.run(["tc", "-n", names.board_ns("tb1"), "qdisc", "show", "dev", "eth0"],
                            capture_output=True, text=True).stdout  # fmt: skip
    assert "tbf" in qdiscs and "rate 100Mbit" in qdiscs
    port0 = subprocess.run(["tc", "-n", names.switch_ns, "qdisc", "show", "dev", "p0"],
                           capture_output=True, text=True).stdout  # fmt: skip
    assert "rate 200Mbit" in port0
    top = CGROUP_ROOT / "cpu" / f"dse.{cluster.name}"
    group = top / "tb1" / "tb1_cpu1"
    # co-runners, no quota; the cluster weighs the most against the machine's other work; a
    # board's devices weigh as their shares do, and so do the boards
    assert spec.cpu_share == "corunner"
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "-1"
    assert (top / "cpu.shares").read_text().strip() == "262144"
    assert (group / "cpu.shares").read_text().strip() == str(round(0.4 * 1024))
    assert (top / "tb1" / "tb1_cpu0" / "cpu.shares").read_text().strip() == str(round(0.6 * 1024))
    assert (top / "tb1" / "cpu.shares").read_text().strip() == "1024"  # 0.6 + 0.4
    # tb1's devices have co-runner cgroups of the least weight on tb1's CPU; tb0's whole-CPU
    # device has none, and no CPU has a share left over
    for d in ("tb1_cpu0", "tb1_cpu1"):
        assert (top / "tb1" / d / "corunner" / "cpu.shares").read_text().strip() == "2"
        cpuset = CGROUP_ROOT / "cpuset" / f"dse.{cluster.name}" / "tb1" / d / "corunner"
        assert (cpuset / "cpuset.cpus").read_text().strip() == "1"
    assert not (top / "tb0" / "tb0_cpu" / "corunner").exists()
    assert not list(top.glob("rest_cpu*"))
    mem = CGROUP_ROOT / "memory" / f"dse.{cluster.name}" / "tb0" / "tb0_cpu"
    assert int((mem / "memory.limit_in_bytes").read_text()) == 300 * 2**20
    assert load(cluster.name) == cluster


def test_self_check_passes(cluster: State) -> None:
    result = check(cluster, CheckSettings(size_mb=1.0, reps=3, rounds=3, chunk_ms=100))
    assert result["errors"] == []
    assert sorted(result["hosts"]) == ["tb0", "tb1"]  # the ranks ran on the boards
    (row,) = result["links"]
    assert row["configured_mbit"] == 100.0  # tb1's port, the slower
    assert 90.0 <= row["best_mbit"] <= 110.0
    assert row["exchange_best_mbit"] > 110.0  # both directions at once: two ports' worth
    got = {d["device"]: d["cpu_got"] for d in result["devices"]}
    # the board's co-runners let a device run at most its share of the time, whatever else
    # runs (give or take a 4 ms scheduler tick); its speed depends on the machine's load
    assert got["tb1_cpu0"] <= 0.6 + 0.1 and got["tb1_cpu1"] <= 0.4 + 0.1
    assert [d["expected"] for d in result["devices"]] == [1.0, 0.6, 0.4]


def test_a_share_that_needs_other_corunners_is_refused_live(cluster: State) -> None:
    """Under co-runners, halving tb0's whole-CPU device would need a co-runner beside what
    already runs on tb0: refused, nothing changed (dse.cluster.live)."""
    saved = (cluster.names.state_dir / "state.json").read_bytes()
    with pytest.raises(DseError) as err:
        set_share(cluster, "tb0_cpu", 0.5)
    assert str(err.value) == (
        f"cluster {cluster.name}: under cpu_share=corunner, a share of 0.5 for tb0_cpu needs "
        "other co-runners on board tb0 than the running ones: bring the cluster up again with "
        "it (platform.emulation.devices.tb0_cpu.share=...), or use cpu_share=weight"
    )
    assert (cluster.names.state_dir / "state.json").read_bytes() == saved


PROGRAM = textwrap.dedent(
    """
    import json, os, socket, sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    data = np.arange(250_000, dtype=np.float64) * (rank + 1)  # 2 MB
    if rank == 0:
        comm.Send(data, 1)
        back = np.empty_like(data)
        comm.Recv(back, 1)
        echoed = bool(np.array_equal(back, data * 2 + 1))
    else:
        got = np.empty_like(data)
        comm.Recv(got, 0)
        comm.Send(got * 2 + 1, 0)
        echoed = None
    total = comm.allreduce(rank + 1)
    cgroups = [line.split(":")[2] for line in open("/proc/self/cgroup").read().split()
               if line.split(":")[1] in ("cpu", "memory")]
    out = {"rank": rank, "host": socket.gethostname(), "total": total, "echoed": echoed,
           "cgroups": sorted(set(cgroups)), "policy": os.sched_getscheduler(0),
           "pace": os.environ.get("DSE_PACE")}
    print(f"rank{rank}: " + json.dumps(out), flush=True)  # boards' disks are their own
    """
)


def _mpi(state: State, devices: list[str], program: str, tmp: Path) -> subprocess.CompletedProcess:
    """``program`` (Python's ``-c``: the boards do not see this machine's files) as one rank
    per device."""
    cmd, env = command(state, devices, tmp, [sys.executable, "-c", program],
                       mpiexec=str(Path(sys.executable).parent / "mpiexec"))  # fmt: skip
    # into files, as the runtime does (dse.runtime.launch.mpiexec): a board's daemon or rank that
    # outlives mpiexec for a moment (a loaded machine) would hold pipes open past its end
    with open(tmp / "stdout.log", "w") as out, open(tmp / "stderr.log", "w") as err:
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=out, stderr=err, cwd=tmp)
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    logs = ((tmp / f"{n}.log").read_text() for n in ("stdout", "stderr"))
    return subprocess.CompletedProcess(cmd, proc.returncode, *logs)


def test_two_ranks_on_two_boards_over_tcp(cluster: State, tmp_path: Path) -> None:
    proc = _mpi(cluster, ["tb0_cpu", "tb1_cpu1"], PROGRAM, tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if line.startswith("rank"))
    r0, r1 = (json.loads(said[f"rank{r}"]) for r in (0, 1))
    assert r0["total"] == r1["total"] == 3  # 1 + 2
    assert r0["echoed"] is True  # 2 MB there and back through the shaped ports, x2 + 1
    assert (r0["host"], r1["host"]) == ("tb0", "tb1")
    top = f"/dse.{cluster.name}"
    assert r0["cgroups"] == [f"{top}/tb0/tb0_cpu"]
    assert r1["cgroups"] == [f"{top}/tb1/tb1_cpu1"]
    # a waking rank does not preempt the device beside it (dse.cluster.launcher)
    assert r0["policy"] == r1["policy"] == os.SCHED_BATCH
    # a device of a share paces its sessions to its speed (dse.runtime.rank.pace); a whole CPU not
    assert (r0["pace"], r1["pace"]) == (None, "0.4")


GREEDY = textwrap.dedent(
    """
    import os
    import numpy as np
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 0:
        block = np.ones(600 << 20, np.uint8)  # 600 MB on a device capped at 300
    MPI.COMM_WORLD.Barrier()
    """
)


def test_a_device_past_its_memory_cap_is_oom_killed(cluster: State, tmp_path: Path) -> None:
    before = {d.name: oom_kills(cluster, d.name) for d in cluster.spec.devices}
    proc = _mpi(cluster, ["tb0_cpu", "tb1_cpu0"], GREEDY, tmp_path)
    assert proc.returncode != 0
    after = {d.name: oom_kills(cluster, d.name) for d in cluster.spec.devices}
    assert after == {**before, "tb0_cpu": before["tb0_cpu"] + 1}  # that device, and only it
    assert 280 <= peak_memory_mb(cluster, "tb0_cpu", reset=True) <= 300  # up to its cap
    assert peak_memory_mb(cluster, "tb0_cpu") < 280  # counting again from what it holds now
    # the same outside MPI: the process dies of SIGKILL, and the count says why
    direct = subprocess.run([str(cluster.launcher), "--in", "tb0/tb0_cpu", sys.executable, "-c",
                             "import numpy as np; b = np.ones(600 << 20, np.uint8)"])  # fmt: skip
    assert direct.returncode == -9
    assert oom_kills(cluster, "tb0_cpu") == after["tb0_cpu"] + 1


def test_stop_processes_and_cut_links(cluster: State) -> None:
    running = [
        subprocess.Popen([str(cluster.launcher), "--in", target, "sleep", "300"])
        for target in ("tb0", "tb1/tb1_cpu0")
    ]
    try:
        for p, board in zip(running, ("tb0", "tb1"), strict=True):
            wait_on_board(cluster, p, board)
        stop_processes(cluster)
        assert [p.wait(timeout=10) for p in running] == [-9, -9]
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
    probe = (
        "import socket, sys\n"
        "try:\n"
        "    socket.create_connection((sys.argv[1], 9), timeout=1)\n"
        "except ConnectionRefusedError:\n"
        "    print('refused')  # tb1 answered: no service there, but the link carries\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    where = str(cluster.address("tb1"))

    def reach() -> str:
        cmd = [str(cluster.launcher), "--in", "tb0", sys.executable, "-c", probe, where]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()

    assert reach() == "refused"
    set_link(cluster, "tb1", False)
    try:
        assert reach() in ("TimeoutError", "timeout")  # cut: nothing comes back
    finally:
        set_link(cluster, "tb1", True)
    assert reach() == "refused"


def test_a_boards_corunners_live_as_long_as_what_the_launcher_started(cluster: State) -> None:
    """While the launcher's process runs on tb1, each of tb1's devices has one co-runner in its
    corunner cgroup (and the device's own cgroup holds only what was started in it); they end
    with that process, however it ends."""
    top = CGROUP_ROOT / "cpu" / f"dse.{cluster.name}" / "tb1"
    groups = [top / d / "corunner" for d in ("tb1_cpu0", "tb1_cpu1")]

    def corunners() -> list[list[int]]:
        return [tasks(g) for g in groups]

    def settle(want: int) -> list[list[int]]:
        deadline = time.monotonic() + 10
        while any(len(t) != want for t in corunners()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return corunners()

    # none left by earlier launches (one that ended before its co-runners' Python started
    # leaves them starting for a few ms: they then see their parent gone and end)
    assert settle(0) == [[], []]
    for stop in ("exit", "kill"):
        proc = subprocess.Popen([str(cluster.launcher), "--in", "tb1/tb1_cpu0", "sleep", "300"])
        try:
            wait_on_board(cluster, proc, "tb1")
            running = settle(1)
            assert [len(t) for t in running] == [1, 1]
            assert tasks(top / "tb1_cpu0") == [proc.pid]  # the co-runners are not the device's
            if stop == "exit":
                os.kill(proc.pid, 15)
            else:
                os.kill(proc.pid, 9)
            proc.wait(timeout=10)
            assert settle(0) == [[], []]
        finally:
            if proc.poll() is None:
                proc.kill()
    # a board whose only device has a whole CPU gets none
    proc = subprocess.Popen([str(cluster.launcher), "--in", "tb0", "sleep", "300"])
    try:
        wait_on_board(cluster, proc, "tb0")
        assert corunners() == [[], []]
        assert not list((CGROUP_ROOT / "cpu" / f"dse.{cluster.name}" / "tb0").rglob("corunner"))
    finally:
        proc.kill()
        proc.wait()


def test_down_leaves_nothing_and_other_clusters_alone(cluster_names) -> None:
    hosts_before = Path("/etc/hosts").read_bytes()
    spec = parse_spec(make_platform(network="shared"), name=cluster_names("down"))
    twin = parse_spec(make_platform(), name=cluster_names("twin"))  # the same board names
    up(spec)
    up(twin)
    assert _root_view(spec.name)["namespaces"] and _root_view(twin.name)["namespaces"]
    assert down(spec.name) is True
    assert _root_view(spec.name) == {
        "namespaces": [], "links": [], "qdiscs": [], "cgroups": [], "state": False,
    }  # fmt: skip
    assert leftovers(spec.name) == []
    assert len(_root_view(twin.name)["namespaces"]) == 3  # the other cluster is untouched
    assert down(twin.name) is True and leftovers(twin.name) == []
    assert down(twin.name) is False  # nothing left to remove
    assert Path("/etc/hosts").read_bytes() == hosts_before


def test_a_killed_run_is_cleaned_by_the_next_up(cluster_names) -> None:
    spec = parse_spec(make_platform(), name=cluster_names("killed"))
    state = up(spec)
    # a run killed midway: the cluster is never taken down and a rank still runs on a board
    orphan = subprocess.Popen([str(state.launcher), "--in", "tb1/tb1_cpu0", "sleep", "300"])
    try:
        wait_on_board(state, orphan, "tb1")
        again = up(spec)
        assert orphan.wait(timeout=10) == -9  # the stale cluster's process was killed
        assert again.subnet == state.subnet
        assert len(_root_view(spec.name)["namespaces"]) == 3
    finally:
        if orphan.poll() is None:
            orphan.kill()
    down(spec.name)
    assert leftovers(spec.name) == []


def test_a_failure_midway_leaves_nothing(cluster_names, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec(make_platform(), name=cluster_names("broken"))

    def fail(*args: object) -> None:
        raise DseError("cgroups refused (simulated)")

    monkeypatch.setattr(build_module.cpu, "build", fail)
    with pytest.raises(DseError, match="simulated"):
        up(spec)
    assert leftovers(spec.name) == []


@pytest.mark.skipif(not TWO_CPUS, reason="edge3_wifi's boards need CPUs 0 and 1")
def test_cli_up_status_down_on_a_shared_medium(cluster_names) -> None:
    name = cluster_names("cli")
    quick = ["check_mb=1", "check_reps=3", "check_rounds=2", "check_chunk_ms=20"]
    up_quota = ["up", "platform=edge3_wifi", f"name={name}", "cpu_share=quota", *quick]
    proc = run_module("dse.cluster", *up_quota)
    assert proc.returncode == 0, proc.stderr
    assert "CPU shares by CFS quotas of period 10 ms" in proc.stdout.splitlines()[0]
    # a CFS quota per device (0.4 x 1 CPU x 10 ms), no co-runners
    group = CGROUP_ROOT / "cpu" / f"dse.{name}" / "edge1" / "edge1_cpu1"
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "4000"
    assert (group / "cpu.cfs_period_us").read_text().strip() == "10000"
    assert not (group / "corunner").exists()
    # and what runs on a board keeps the default policy (SCHED_BATCH is for co-runners)
    shared = load(name)
    policy = "import os; print(os.sched_getscheduler(0))"
    on_board = [str(shared.launcher), "--in", "edge1/edge1_cpu1", sys.executable, "-c", policy]
    ran = subprocess.run(on_board, capture_output=True, text=True, timeout=30)
    assert ran.stdout.strip() == str(os.SCHED_OTHER), ran.stderr
    # nor paces its sessions: yielding would spend the device's quota (dse.cluster.cpu)
    env = [*on_board[:4], "-c", "import os; print(os.environ.get('DSE_PACE'))"]
    assert subprocess.run(env, capture_output=True, text=True, timeout=30).stdout.strip() == "None"
    (pair,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("  edge0 <-> edge1")]
    assert pair.split()[3:5] == ["100", "Mbit/s"]  # configured: the medium's rate
    assert "every link within its tolerance" in proc.stdout
    status = run_module("dse.cluster", "status", f"name={name}")
    assert status.returncode == 0
    checked = proc.stdout[proc.stdout.index(f"cluster {name} (platform") :]
    assert checked in status.stdout  # status reprints the check up made
    assert shared.spec.network == "shared"
    result = json.loads((shared.names.state_dir / "check.json").read_text())
    (row,) = result["links"]
    # one medium: both directions at once share its 100 Mbit/s
    assert 85.0 <= row["exchange_best_mbit"] <= 110.0
    gone = run_module("dse.cluster", "down", f"name={name}")
    assert gone.returncode == 0 and f"cluster {name} removed" in gone.stdout
    assert leftovers(name) == []


def test_shares_by_weights_pace_ranks_and_start_nothing_beside_them(cluster_names) -> None:
    """The default cpu_share: each device's cgroup weighs its share, with no quota and no
    co-runner cgroup; a rank on a device of a share gets its speed to pace to (0.4 of tb1's one
    CPU), one on a whole CPU none; both run under SCHED_BATCH (dse.cluster.cpu)."""
    spec = parse_spec(make_platform(), name=cluster_names("weight"))
    assert spec.cpu_share == "weight"
    state = up(spec)
    top = CGROUP_ROOT / "cpu" / f"dse.{spec.name}"
    for d, share in (("tb1_cpu0", 0.6), ("tb1_cpu1", 0.4)):
        assert (top / "tb1" / d / "cpu.shares").read_text().strip() == str(round(share * 1024))
        assert (top / "tb1" / d / "cpu.cfs_quota_us").read_text().strip() == "-1"
    assert not list(top.rglob("corunner")) and not list(top.glob("rest_cpu*"))
    # what a command on a device sees: its pace, its policy, and how many other processes
    # run in its board's cgroups but the board's sshd (co-runners would)
    probe = (
        "import os, pathlib, sys\n"
        "pids = {int(x) for f in pathlib.Path(sys.argv[1]).rglob('cgroup.procs')"
        " for x in f.read_text().split()}\n"
        "print(os.environ.get('DSE_PACE'), os.sched_getscheduler(0),"
        " len(pids - {os.getpid(), int(sys.argv[2])}))"
    )
    got = {}
    for where in ("tb1/tb1_cpu1", "tb0/tb0_cpu"):
        board = str(top / where.split("/")[0])
        sshd = str(listener(state.names, where.split("/")[0]))
        cmd = [str(state.launcher), "--in", where, sys.executable, "-c", probe, board, sshd]
        ran = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        got[where] = ran.stdout.split()
    assert got == {
        "tb1/tb1_cpu1": ["0.4", str(os.SCHED_BATCH), "0"],
        "tb0/tb0_cpu": ["None", str(os.SCHED_BATCH), "0"],
    }
    down(spec.name)
    assert leftovers(spec.name) == []


def test_cli_bad_input_is_one_line(cluster_names) -> None:
    name = cluster_names("bad")
    share = "platform.emulation.devices.edge1_cpu0.share=1.5"
    cases = [
        (["up", "platform=edge3_ethernet", share, f"name={name}"],
         "edge1_cpu0.share: 1.5 is out of range: expected at most 1"),
        (["up", "platform=edge3_ethernet", "platform.emulation.rate_mbit=0", f"name={name}"],
         "emulation.rate_mbit: 0 is out of range: expected above 0"),
        (["up", "platform=localhost", f"name={name}"], "has no emulation: section"),
        (["up", f"name={name}"], "no platform given"),
        (["down"], "which cluster?"),
    ]  # fmt: skip
    for args, needle in cases:
        proc = run_module("dse.cluster", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, proc.stderr)
        assert leftovers(name) == []
    usage = run_module("dse.cluster", "sideways")
    assert usage.returncode == 2 and "usage: python -m dse.cluster up|" in usage.stderr
    not_up = run_module("dse.cluster", "status", f"name={name}")
    assert not_up.returncode == 2 and f"cluster '{name}' is not up" in not_up.stderr
