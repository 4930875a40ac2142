"""The runtime on an emulated cluster: deployments run their ranks on the boards through
``dse.cluster.launcher_for``, over TCP between boards and shared memory within one; an OOM kill
and a cut link fail a mapping with their cause, the other mappings go on, and nothing of a
failed run stays on the boards.

The launcher's command and files and the one-line errors need no cluster; the runs need root,
network namespaces, tc and cgroup v1 (the ``cluster_names`` fixture skips, saying what is
missing) and mpiexec (marked ``mpi``). The networks are small (a few convolutions; a 94 MB
Gemm for the memory cap), so the module takes well under a minute.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dse.cluster import (
    cluster_launcher,
    launcher_for,
    parse_spec,
    peak_memory_mb,
    set_link,
    up,
)
from dse.cluster.state import State
from dse.config import Phase2Config
from dse.errors import DseError
from dse.fidelity.measure import measure as fidelity_measure
from dse.fidelity.settings import FidelitySettings
from dse.mapping import Mappings, to_autodice
from dse.measuring.comparison import read_comparison
from dse.measuring.measure import Settings, measure_one
from dse.measuring.phase2 import measure_phase2
from dse.measuring.rounds import Rounds
from dse.net import Net, load_net
from dse.platform import load_platform
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import Launcher, launch, mpi_files, placement
from dse.runtime.launch.probe import probe_cores, probe_threads
from dse.runtime.launch.ship import Remote
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers.cli import ROOT, run_module
from tests.helpers.cluster import (
    CONF,
    left_on_boards,
    make_platform,
    platform_yaml,
    wait_for_ranks,
)
from tests.helpers.nets import heavy_net, on_devices, small_net
from tests.helpers.partition import RTOL

#: The memory cap of the test cluster's tb1_cpu1 (MB): a rank of a small network is charged
#: ~45 MB in its device's cgroup, one holding the 94 MB Gemm ~140 MB.
CAP_MB = 100.0


# --- networks and what the boards show ------------------------------------------------------


def model_of(net: Net, platform_cfg: dict) -> AnalyticalModel:
    coefficients = load_coefficients(CONF / platform_cfg["coefficients"])
    return AnalyticalModel(net.graph, load_platform(platform_cfg), coefficients)


def tx_bytes(state: State, board: str) -> int:
    """Bytes the board's port has sent, as the kernel counts them (``ip -s``)."""
    ns = state.names.board_ns(board)
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "eth0"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


# --- the launcher, without a cluster ---------------------------------------------------------


def test_a_platform_without_emulation_runs_on_its_hosts_by_name() -> None:
    """This machine's hosts share its disk; other hosts get each run's files over ssh, as
    ``reach:`` says, unless they share a disk with it."""
    assert launcher_for(platform_yaml("localhost")) == Launcher()
    boards = {k: v for k, v in platform_yaml("edge3_ethernet").items() if k != "emulation"}
    assert launcher_for(boards) == Launcher(remote=Remote(("ssh",), "/var/tmp/dse"))
    reach = {"ssh": "ssh -F '/my boards/config' -p 2222", "area": "/data/dse"}
    assert launcher_for({**boards, "reach": reach}).remote == Remote(
        ("ssh", "-F", "/my boards/config", "-p", "2222"), "/data/dse"
    )
    assert launcher_for({**boards, "reach": {"shared_disk": True}}) == Launcher()
    with pytest.raises(DseError, match=r"reach.area=dse is not an absolute path: name the"):
        launcher_for({**boards, "reach": {"area": "dse"}})
    with pytest.raises(DseError, match=r"platform 'edge3_ethernet'.*reach.*arae"):
        launcher_for({**boards, "reach": {"arae": "/x"}})


def test_the_cluster_launcher_places_each_rank_on_its_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the runtime's command becomes on edge3_ethernet (a cluster state made by hand,
    nothing started): mpiexec reaches the boards by ssh with the cluster's config, each board
    from here, talks over its subnet, passes the ranks their wait setting, binds every rank to
    its board's one CPU (edge1's two devices share it, each under its quota) and starts each
    rank through the rank script, which moves it into its device's cgroups; the ranks find the
    deployment where a run ships it, in the boards' deployment area."""
    for name in [k for k in os.environ if k.startswith("DSE_")]:
        monkeypatch.delenv(name)
    cfg = platform_yaml("edge3_ethernet")
    state = State(parse_spec(cfg, available=[0, 1]), ipaddress.IPv4Network("198.18.7.0/24"))
    launcher = cluster_launcher(state)
    platform = load_platform(cfg)
    devices = [2, 0, 1]  # edge1_cpu1, edge0_cpu, edge1_cpu0
    hostfile, rankfile = mpi_files(platform, devices, launcher)
    assert hostfile == "edge1 slots=2\nedge0 slots=1\n"
    assert rankfile == "rank 0=edge1 slot=0\nrank 1=edge0 slot=0\nrank 2=edge1 slot=0\n"
    # on the hosts by name, edge1's second device would take a second core edge1 lacks
    assert mpi_files(platform, devices)[1].splitlines()[0] == "rank 0=edge1 slot=1"
    d = tmp_path.resolve()
    assert launcher.remote is not None
    there = launcher.remote.directory(d)
    digest = hashlib.sha256(f"{socket.gethostname()}:{d}".encode()).hexdigest()[:12]
    assert there == f"/var/tmp/dse/{d.name}-{digest}"
    cmd = launcher.command(tmp_path, 3, mpiexec="mpiexec", placement=placement(platform, devices),
                           on_hosts=there)  # fmt: skip
    assert cmd == [
        "mpiexec", "-n", "3", "--hostfile", f"{d}/hostfile",
        "--map-by", f"rankfile:file={d}/rankfile:oversubscribe",
        "-x", "DSE_WAIT_SPIN_US",
        "--prtemca", "plm_ssh_args", "-F /run/dse-cluster/edge3_ethernet/ssh/config",
        "--prtemca", "plm_ssh_no_tree_spawn", "1",
        "--prtemca", "oob_tcp_if_include", "198.18.7.0/24",
        "--mca", "btl_tcp_if_include", "198.18.7.0/24",
        "/run/dse-cluster/edge3_ethernet/rank", "edge1/edge1_cpu1,edge0/edge0_cpu,edge1/edge1_cpu0",
        sys.executable, "-m", "mpi4py", "-m", "dse.runtime", there,
    ]  # fmt: skip
    assert launcher.environment()["OMPI_MCA_mpi_yield_when_idle"] == "1"
    # its ranks poll then sleep while they wait (a spinning rank burns its device's quota)
    assert launcher.env["DSE_WAIT_SPIN_US"] == "50"
    with pytest.raises(ValueError, match="needs the 3 ranks' placement"):
        launcher.command(tmp_path, 3, mpiexec="mpiexec")
    # the speed probe times each board's cores of this machine (edge1's two devices: once)
    allowed = os.sched_getaffinity(0)
    assert probe_cores(platform, launcher) == [c for c in ({0}, {1}) if c <= allowed]


def test_a_cluster_not_up_is_one_line() -> None:
    cfg = make_platform(name="dsetest-never-up")
    with pytest.raises(DseError) as err:
        launcher_for(cfg)
    assert str(err.value) == (
        "cluster 'dsetest-never-up' is not up: run python -m dse.cluster up "
        "platform=dsetest-never-up"
    )
    # a deployment only written: for the hosts by name, shipped to them by plain ssh
    assert launcher_for(cfg, required=False) == Launcher(remote=Remote())


@pytest.mark.parametrize(
    "entry",
    [
        ["dse.deploy", "+net=alexnet", "mapping=nowhere.json", "measure=true"],
        ["dse", "+net=alexnet", "phase2.enabled=true", "progress=false"],
        ["dse.fidelity", "+net=alexnet"],
        ["dse.calibrate", "quick=true"],
    ],
    ids=["deploy", "phase2", "fidelity", "calibrate"],
)
def test_every_workflow_says_in_one_line_that_the_cluster_is_not_up(entry: list[str]) -> None:
    name = "dsetest-never-up"
    proc = run_module(*entry, "platform=edge3_ethernet", f"platform.name={name}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: cluster '{name}' is not up: run python -m dse.cluster up "
        f"platform=edge3_ethernet platform.name={name}"
    ]


# --- runs on real clusters (root, namespaces, tc, cgroup v1, mpiexec) -------------------------


@pytest.fixture(scope="module")
def edge3(cluster_names) -> tuple[dict, State]:
    """edge3_ethernet as shipped, up under a name of its own (platform.name=...)."""
    cfg = {**platform_yaml("edge3_ethernet"), "name": cluster_names("edge3")}
    return cfg, up(parse_spec(cfg))


@pytest.fixture(scope="module")
def capped(cluster_names) -> tuple[dict, State]:
    """The two-board test platform (tb0: one device, 200 Mbit/s; tb1: two, 100 Mbit/s) named
    after its cluster, with tb1_cpu1's memory capped at :data:`CAP_MB`."""
    cfg = make_platform(name=cluster_names("runs"))
    cfg["devices"][2]["memory_mb"] = CAP_MB
    return cfg, up(parse_spec(cfg))


@pytest.mark.mpi
def test_deploy_cli_runs_a_b_a_across_the_boards(edge3, tmp_path: Path) -> None:
    """`python -m dse.deploy measure=true` on edge3_ethernet, renamed: conv1 on edge0, conv2
    on edge1, conv3 back on edge0. The outputs equal the whole model's, each rank sends the
    model's bytes, ranks ran on their boards and in their devices' cgroups, the tensors
    crossed the boards' ports, and the pipelined period sits beside its prediction."""
    cfg, state = edge3
    net = small_net(tmp_path)
    batch = on_devices(net, 3, [[0], [0], [1], [1], [0]])
    mapping, _ = to_autodice(net.graph, [d["name"] for d in cfg["devices"]], batch)
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    for d in state.spec.devices:
        peak_memory_mb(state, d.name, reset=True)
    sent_before = {b: tx_bytes(state, b) for b in ("edge0", "edge1")}
    out = tmp_path / "aba"
    proc = run_module(
        "dse.deploy", "+net=onnx", f"net.path={tmp_path / 'small.onnx'}",
        "platform=edge3_ethernet", f"platform.name={state.name}",
        f"mapping={tmp_path / 'mapping.json'}", f"out={out}", "measure=true",
        "warmup=1", "iterations=3", "stream=4", "timeout_s=120",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = read_comparison(out)
    assert r.status == "ok"
    assert r.equivalence.passed and r.equivalence.max_rel_error <= RTOL
    ranks = {x.device: x for x in r.ranks}
    assert {d: x.hostname for d, x in ranks.items()} == {
        "edge0_cpu": "edge0",
        "edge1_cpu0": "edge1",
    }
    model_bytes = model_of(net, cfg).evaluate(batch).bytes_sent[0]  # per device, in order
    assert {d: x.bytes_sent for d, x in ranks.items()} == {
        "edge0_cpu": int(model_bytes[0]),
        "edge1_cpu0": int(model_bytes[1]),
    }
    # r1 (16 x 32 x 32 floats) to edge1, r2 (32 x 32 x 32) back: by hand
    assert (ranks["edge0_cpu"].bytes_sent, ranks["edge1_cpu0"].bytes_sent) == (65536, 131072)
    # each board's port sent at least its rank's tensors of the 4 timed iterations
    for board, device in (("edge0", "edge0_cpu"), ("edge1", "edge1_cpu0")):
        assert tx_bytes(state, board) - sent_before[board] >= 4 * ranks[device].bytes_sent
    # each rank ran in its device's memory cgroup (~45 MB charged); edge1_cpu1 ran nothing
    assert peak_memory_mb(state, "edge0_cpu") > 20 and peak_memory_mb(state, "edge1_cpu0") > 20
    assert peak_memory_mb(state, "edge1_cpu1") < 5
    plan = json.loads((out / "plan.json").read_text())
    assert f"plm_ssh_args '-F {state.names.state_dir}/ssh/config' " in plan["command"]
    assert f" {state.rank_script} edge0/edge0_cpu,edge1/edge1_cpu0 " in plan["command"]
    period = r.comparison.period_ms
    assert period.measured == r.stream.period_ms > 0
    assert period.predicted == r.predicted.objectives["period_ms"]
    assert "stream period" in proc.stdout
    assert left_on_boards(state) == []


def test_a_run_waits_for_another_processs_run_on_the_cluster(capped) -> None:
    """While one process runs on the cluster (it holds ``one_run``, as a deployment, a
    calibration unit or a self-check does), a run of another process through the cluster's
    launcher says whose run it waits for and starts only once that run has ended."""
    _, state = capped
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from dse.cluster.state import load, one_run\n"
         f"with one_run(load({state.name!r})):\n"
         "    print('held', flush=True); sys.stdin.readline()"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    waiter = None
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen(
            [sys.executable, "-c",
             "from dse.cluster import cluster_launcher\nfrom dse.cluster.state import load\n"
             f"with cluster_launcher(load({state.name!r})).watched([('tb0', 'tb0_cpu')]):\n"
             "    print('ran', flush=True)"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        said = waiter.stderr.readline()
        assert f"cluster '{state.name}' is running a run of pid {holder.pid}" in said
        assert "waiting for it to end" in said
        assert waiter.poll() is None  # still waiting, having said so
        holder.stdin.close()  # the holder's run ends
        out, err = waiter.communicate(timeout=30)
        assert (waiter.returncode, out.strip()) == (0, "ran"), err
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.mpi
def test_a_lop_mapping_splits_layers_across_two_boards(capped, tmp_path: Path) -> None:
    """Every conv split over tb0_cpu, tb1_cpu0 and tb1_cpu1 (parts gathered over TCP between
    the boards and shared memory within tb1), the relus on tb0_cpu."""
    cfg, state = capped
    net = small_net(tmp_path)
    batch = on_devices(net, 3, [[0, 1, 2], [0], [0, 1, 2], [0], [0, 1, 2]])
    model = model_of(net, cfg)
    for d in state.spec.devices:
        peak_memory_mb(state, d.name, reset=True)
    settings = Settings(Rounds(1, warmup=1, iterations=2, timeout_s=120))
    r = measure_one(net, model, batch, tmp_path / "lop", settings, launcher_for(cfg))
    assert r.status == "ok", r.reason
    assert r.equivalence.passed and r.equivalence.max_rel_error <= RTOL
    assert [x.bytes_sent for x in r.ranks] == [int(b) for b in model.evaluate(batch).bytes_sent[0]]
    assert all(x.bytes_sent > 0 for x in r.ranks)
    assert [x.hostname for x in r.ranks] == ["tb0", "tb1", "tb1"]
    assert all(peak_memory_mb(state, d.name) > 20 for d in state.spec.devices)
    assert left_on_boards(state) == []


@pytest.mark.mpi
@pytest.mark.slow
def test_an_oom_kill_fails_its_mapping_and_the_others_go_on(capped, tmp_path: Path) -> None:
    """The Gemm on tb1_cpu1 (capped at 100 MB) is OOM-killed: that mapping is failed, naming
    the device and its cap, in phase two and in fidelity; the Gemm on tb1_cpu0 (512 MB) is
    measured, with its pipelined period."""
    cfg, state = capped
    net = heavy_net(tmp_path)
    platform, model = load_platform(cfg), model_of(net, cfg)
    batch = Mappings.concat(
        [on_devices(net, 3, [[0], [0], [0], [2]]), on_devices(net, 3, [[0], [0], [0], [1]])]
    )
    launcher = launcher_for(cfg)
    settings = Phase2Config(warmup=1, iterations=2, timeout_s=120, stream=3)
    rows = measure_phase2(
        tmp_path, net, platform, model, batch, ["capped", "roomy"], settings, launcher=launcher
    )
    cause = f"tb1_cpu1 on board tb1 ran out of its {CAP_MB:g} MB memory cap (OOM kill)"
    assert rows[0]["status"] == "failed" and rows[0]["reason"].startswith(cause + "; ")
    assert rows[1]["status"] == "ok" and rows[1]["period_measured_ms"] > 0
    predicted = model.evaluate(batch.take(1)).prediction(platform).objectives["period_ms"]
    assert rows[1]["period_predicted_ms"] == predicted
    written = list(csv.DictReader((tmp_path / "phase2.csv").open()))
    assert [(w["mapping"], w["status"]) for w in written] == [("capped", "failed"), ("roomy", "ok")]
    assert left_on_boards(state) == []
    s = FidelitySettings(
        mappings=2, rounds=2, warmup=1, iterations=2, timeout_s=120, stream=3, seed=0,
        probe=True, keep=False, search_pop_size=2, search_generations=1,
    )  # fmt: skip
    # calibration probed MobileNetV2 (not this network), at an impossible 0.1 ms (a few ms at
    # the least on any core): its probes beside the runs say the machine runs many times slower
    model.coefficients.notes["speed_reference"] = {
        "threads": probe_threads(platform),
        "whole_ms": {"mobilenetv2": 0.1},
        "fingerprints": {"mobilenetv2": load_net({"name": "mobilenetv2"}).fingerprint},
    }
    measured = fidelity_measure(
        tmp_path / "fid", net, model, batch, ["capped", "roomy"], s, lambda: None, launcher
    )
    first, second = measured.results
    assert first.status == "failed" and first.reason.startswith(cause + "; ")
    again = measured.ran_again == ["roomy"]  # its rounds lay more than 10 % apart: a third
    assert second.status == "ok" and len(second.stream.rounds_ms) == 2 + again
    assert second.comparison.period_ms.measured == pytest.approx(
        np.median(second.stream.rounds_ms), abs=1e-3
    )
    # the boards are this machine's cores: probed between runs. Calibration did not probe
    # this network, so each round's period is brought to this run's median probe over how
    # much slower MobileNetV2 ran than then (by hand here): the boards' work that many times
    # faster, the image crossing from tb0 in its own time, so each round lands between itself
    # and itself wholly scaled (at 4 decimals, as comparison.json keeps them)
    speed = measured.speed
    assert speed.reference == "calibrated networks" and speed.networks == ["mobilenetv2"]
    assert speed.slower_pct > 300 and speed.reference_ms < speed.probe_ms / 4
    rounds = np.array(second.stream.rounds_ms)
    whole = rounds * speed.reference_ms / np.array(second.latency_ms.rounds_probe_ms)
    adjusted = np.array(second.stream.drift.rounds_adjusted_ms)
    assert np.all(whole - 1e-4 <= adjusted) and np.all(adjusted <= rounds)
    assert second.comparison.period_adjusted_ms.measured == pytest.approx(
        np.median(adjusted), rel=1e-3
    )
    assert left_on_boards(state) == []


@pytest.mark.mpi
@pytest.mark.slow
def test_a_cut_link_fails_within_the_time_limit_and_leaves_nothing(capped, tmp_path: Path):
    """tb1's link goes down while an A -> B -> A mapping runs: the run fails at its time limit
    (the ranks wait for messages that never come), naming the link, and no process of it is
    left on either board (Open MPI's daemons there outlive mpiexec's session); a run while it
    is down is refused in one line."""
    cfg, state = capped
    net = small_net(tmp_path)
    batch = on_devices(net, 3, [[0], [0], [1], [1], [0]])
    launcher = launcher_for(cfg)
    out = tmp_path / "cut"
    deploy(net, load_platform(cfg), batch, out, warmup=1, iterations=10**7, launcher=launcher)
    cut: list[float] = []

    def cut_when_running() -> None:
        if wait_for_ranks(state, "tb1"):
            time.sleep(1.0)  # loaded and exchanging tensors
            set_link(state, "tb1", False)
            cut.append(time.monotonic())

    cutter = threading.Thread(target=cut_when_running)
    cutter.start()
    started = time.monotonic()
    try:
        r = launch(out, timeout_s=10, launcher=launcher)
        took = time.monotonic() - started
        cutter.join()
        assert cut, "the ranks never started on tb1"
        assert left_on_boards(state) == []
        # the link still down: the next run is refused at once rather than left to time out
        with pytest.raises(DseError, match="board tb1's link is down, so a run there cannot"):
            launch(out, timeout_s=10, launcher=launcher)
    finally:
        cutter.join()
        set_link(state, "tb1", True)
    assert r == Measurement.failed("board tb1's link is down; timed out after 10 s")
    assert took < 10 + 8  # the time limit, then SIGTERM, SIGKILL and the boards emptied


def test_a_cluster_of_another_version_of_the_platform_is_one_line(capped) -> None:
    cfg, state = capped
    changed = copy.deepcopy(cfg)
    changed["devices"][0]["memory_mb"] = 200
    with pytest.raises(DseError) as err:
        launcher_for(changed)
    line = str(err.value)
    assert line.startswith(f"cluster '{state.name}' runs another version of its platform ")
    assert "memory_mb=200.0) in the platform" in line and "memory_mb=300.0) running" in line
    assert line.endswith(f"run python -m dse.cluster up platform={state.name} again")
    assert "\n" not in line


@pytest.mark.mpi
@pytest.mark.slow
def test_the_whole_loop_on_boards_with_disks_of_their_own(edge3, tmp_path: Path) -> None:
    """What a user runs on real boards, on edge3_ethernet's emulated ones (their own disks,
    reached by ssh): a search whose phase two measures its best mappings, each right against the
    whole model, then a small fidelity run; every run shipped its deployment to the boards."""
    cfg, state = edge3
    on = ["platform=edge3_ethernet", f"platform.name={state.name}", "+net=mobilenetv2"]
    run = tmp_path / "run"
    search = run_module(
        "dse", *on, "algorithm.pop_size=20", "algorithm.n_gen=2", "phase2.enabled=true",
        "phase2.top_k=0", "phase2.warmup=1", "phase2.iterations=2", "progress=false",
        f"hydra.run.dir={run}",
    )  # fmt: skip
    assert search.returncode == 0, search.stderr[-2000:]
    rows = list(csv.DictReader((run / "phase2.csv").open()))
    assert rows and all(r["status"] == "ok" for r in rows), rows
    assert all(float(r["max_rel_error"]) <= RTOL for r in rows)
    shipped = [json.loads(p.read_text()) for p in run.glob("phase2/*/shipped.json")]
    assert len(shipped) == len(rows)
    assert all(s["directory"].startswith("/var/tmp/dse/") for s in shipped)
    fid = tmp_path / "fidelity"
    fidelity = run_module(
        "dse.fidelity", *on, "mappings=2", "rounds=1", "warmup=0", "iterations=2",
        "search_pop_size=10", "search_generations=1", "probe=false", f"out={fid}",
    )  # fmt: skip
    assert fidelity.returncode == 0, fidelity.stderr[-2000:]
    doc = json.loads((fid / "fidelity.json").read_text())
    assert doc["failed"] == [] and doc["latency"]["n"] == 2
    assert len(list(fid.glob("deployments/*/shipped.json"))) == 2
    assert left_on_boards(state) == []
