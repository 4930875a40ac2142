"""The runtime under mpiexec with 2 ranks on localhost: a LOP mapping, an A -> B -> A vertical
mapping, a killed rank and a hung run (no process of theirs is left), and the deploy CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import onnx
import pytest
import yaml
from onnx import helper

from dse.errors import DseError
from dse.mapping import from_device_lists, to_autodice
from dse.measuring.comparison import Figure, read_comparison
from dse.measuring.measure import Settings, measure_one
from dse.measuring.rounds import Rounds
from dse.net import Net, load_net
from dse.platform import load_platform
from dse.runtime.deployment.measurements import Measurement, read_measurements
from dse.runtime.launch import mpiexec
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import launch
from dse.runtime.rank.energy import energy_meter
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers import onnx_factory
from tests.helpers.cli import ROOT, run_module
from tests.helpers.mpi import flaky_mpiexec
from tests.helpers.nets import aba_batch, zoo_like
from tests.helpers.partition import RTOL


@pytest.fixture(scope="module")
def localhost():
    return load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))


def alive(directory: Path) -> list[int]:
    """Pids of processes whose command line names ``directory``."""
    pids = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = p.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(directory) in cmd and int(p.parent.name) != os.getpid():
            pids.append(int(p.parent.name))
    return pids


@pytest.mark.mpi
def test_lop_mapping(tmp_path: Path, localhost) -> None:
    """Every Conv, ConvTranspose, Gemm and MatMul split over both ranks (grouped ones across
    their groups), the rest on rank 0."""
    net = zoo_like(tmp_path)
    n = len(net.graph)
    lists = [[[0, 1] if net.graph.splittable[i] else [0] for i in range(n)]]
    batch = from_device_lists(net.graph, 2, lists)
    coeff = load_coefficients(ROOT / "conf/platform/localhost.json")
    model = AnalyticalModel(net.graph, localhost, coeff)
    out = tmp_path / "lop"
    r = measure_one(net, model, batch, out, Settings(Rounds(1, warmup=1, iterations=2)))
    assert r.status == "ok", r.reason
    assert r.equivalence.passed and r.equivalence.max_rel_error <= RTOL
    assert len(r.latency_ms.all) == 2
    # split layers' parts are all-gathered where they are read: the bytes are the model's
    bytes_sent = model.evaluate(batch).bytes_sent[0]
    assert [x.bytes_sent for x in r.ranks] == [int(b) for b in bytes_sent]
    assert r.comparison.devices["localhost_cpu1"].bytes_sent.error_pct == 0.0
    meter = energy_meter()  # the ranks run here: they read the counter this process finds
    if meter.available:
        assert all(x.energy_j is not None and x.energy_scope == meter.kind for x in r.ranks)
    else:
        assert all(x.energy_j is None and x.energy_reason == meter.reason for x in r.ranks)
    # rank 0 wrote the measurement; this process the comparison (the measurement beside the
    # prediction); each file has its one writer
    measured = read_measurements(out)
    assert type(measured) is Measurement  # the ranks' file holds no prediction
    assert "predicted" not in json.loads((out / "measurements.json").read_text())
    compared = read_comparison(out)
    assert compared == r
    # the prediction of this mapping beside the median rank 0 measured, the error from the two
    pred, meas = compared.predicted.latency_ms, measured.latency.median
    assert pred == round(float(model.evaluate(batch).latency_s[0]) * 1e3, 4)
    error = round((pred - meas) / meas * 100, 2)
    assert compared.comparison.latency_ms == Figure(pred, meas, error)
    assert {f.name: getattr(compared, f.name) for f in fields(Measurement)} == vars(measured)


@pytest.mark.mpi
def test_a_b_a_vertical_mapping(tmp_path: Path, localhost) -> None:
    net = zoo_like(tmp_path)
    out = tmp_path / "aba"
    plan = deploy(net, localhost, aba_batch(net), out, warmup=1, iterations=3, stream=6)
    # rank 0 runs, sends to 1, and waits for 1's result before it runs again
    steps = [s.op for s in plan.ranks[0].steps]
    assert steps[:3] == ["run", "send", "recv"] and steps.count("recv") >= 3
    r = launch(out, timeout_s=120)
    assert r.status == "ok", r.reason
    # the outputs compared are those of the last of 6 frames streamed with several in flight
    assert r.iterations == 3 and r.equivalence.passed
    assert r.stream.frames == 6 and r.stream.period_ms > 0
    # every edge crosses (float32 bytes): cpu0 sends a, g (8 x 8 x 8 each), s (6 x 16 x 16),
    # r (6) and f2 (12); cpu1 ra, d (8 x 8 x 8 each), t2 (6 x 16 x 16), pool (6) and f1 (10)
    # (the graph outputs are checked where they are made: m is not sent back)
    sent = {x.device: x.bytes_sent for x in r.ranks}
    assert sent == {
        "localhost_cpu0": 4 * (2 * 512 + 1536 + 6 + 12),
        "localhost_cpu1": 4 * (2 * 512 + 1536 + 6 + 10),
    }


@pytest.mark.mpi
def test_killed_rank_fails_with_its_reason_and_leaves_no_process(tmp_path: Path, localhost):
    net = zoo_like(tmp_path)
    out = tmp_path / "killed"
    deploy(net, localhost, aba_batch(net), out, warmup=1, iterations=50)
    r = launch(out, timeout_s=120, rank_args=["--kill-rank", "1"])
    assert r.status == "failed"
    assert "exited with" in r.reason and "rank 1" in r.reason
    assert not (out / "measurements.json").exists()
    assert alive(out) == []


@pytest.mark.mpi
def test_time_limit_stops_every_rank(tmp_path: Path, localhost) -> None:
    net = zoo_like(tmp_path)
    out = tmp_path / "slow"
    deploy(net, localhost, aba_batch(net), out, warmup=1, iterations=10**7)
    r = launch(out, timeout_s=4)
    assert r == Measurement.failed("timed out after 4 s")
    assert alive(out) == []


def test_missing_mpiexec_is_one_line(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mpiexec.shutil, "which", lambda _: None)
    monkeypatch.setattr(mpiexec.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(DseError, match="mpiexec not found"):
        mpiexec.mpiexec_path()


def test_full_disk_leaves_nothing_behind(monkeypatch, tmp_path: Path, localhost) -> None:
    net = zoo_like(tmp_path)

    def full(self, directory: Path) -> None:
        (Path(directory) / "rank0_seg0.onnx").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("dse.runtime.compile.partition.Deployment.write_segments", full)
    with pytest.raises(DseError, match="No space left on device"):
        deploy(net, localhost, aba_batch(net), tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zoo_like.onnx"]


def test_a_deployment_directory_has_one_writer_and_keeps_the_users_files(
    tmp_path: Path, localhost
) -> None:
    """A redeploy of the same mapping replaces its own files, drops the earlier run's
    measurements and keeps what the user put beside them; while another process owns out=,
    a deploy into it is one line naming that process."""
    net = zoo_like(tmp_path)
    out = tmp_path / "out"
    deploy(net, localhost, aba_batch(net), out)
    (out / "notes.txt").write_text("mine")
    (out / "measurements.json").write_text("{}")
    deploy(net, localhost, aba_batch(net), out)
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "measurements.json").exists() and (out / "plan.json").is_file()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from dse.files import owned\n"
         f"with owned({str(out)!r}):\n    print('held', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DseError, match=f"is in use by pid {holder.pid}"):
            deploy(net, localhost, aba_batch(net), out)
    finally:
        holder.kill()
        holder.wait()


def test_gpu_without_cuda_is_one_line(tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    from dse.platform import Device, Link, Platform
    from dse.runtime.launch.deploy import check_gpus

    plat = Platform(
        "g",
        (Device("b_cpu", "b", "cpu", 1, 1e4), Device("b_gpu", "b", "gpu", 1, 1e4)),
        {"cpu_gpu": Link(0.0, 1e9)},
        entry=0,
    )
    net = zoo_like(tmp_path)
    batch = from_device_lists(net.graph, 2, [[[1]] * len(net.graph)])
    with pytest.raises(DseError, match="b_gpu is a gpu but onnxruntime has no CUDA"):
        check_gpus(plat, batch)


def test_deploy_cli(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    n = len(net.graph)
    batch = from_device_lists(net.graph, 2, [[[0] if i < 5 else [1] for i in range(n)]])
    keys = ["localhost_cpu0", "localhost_cpu1"]
    mapping, _ = to_autodice(net.graph, keys, batch)
    m = tmp_path / "mapping.json"
    m.write_text(json.dumps(mapping))
    out = tmp_path / "dep"
    common = ["+net=onnx", f"net.path={tmp_path / 'zoo_like.onnx'}", "platform=localhost"]
    r = run_module("dse.deploy", *common, f"mapping={m}", f"out={out}")
    assert r.returncode == 0, r.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert plan["fingerprint"] == net.fingerprint and len(plan["ranks"]) == 2
    assert (out / "rankfile").read_text() == "rank 0=localhost slot=0\nrank 1=localhost slot=1\n"
    assert (out / "hostfile").read_text() == "localhost slots=2\n"
    assert "mpiexec -n 2 --hostfile" in (out / "run.sh").read_text()
    # the same directory for another mapping or another net: refused in one line, kept as it was
    m2 = tmp_path / "other.json"
    m2.write_text(json.dumps({"localhost_cpu0": list(net.graph.names)}))
    r = run_module("dse.deploy", *common, f"mapping={m2}", f"out={out}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "another mapping" in r.stderr
    alexnet = load_net({"name": "alexnet"})
    m3 = tmp_path / "alexnet.json"
    m3.write_text(json.dumps({"localhost_cpu0": list(alexnet.graph.names)}))
    r = run_module(
        "dse.deploy", "+net=alexnet", f"mapping={m3}", "platform=localhost", f"out={out}"
    )
    assert r.returncode == 2 and "not of this net" in r.stderr
    assert json.loads((out / "plan.json").read_text()) == plan


def test_deploy_without_out_goes_under_runs(tmp_path: Path) -> None:
    """No out=: runs/deploy/<net>-<mapping hash> under the current directory."""
    import subprocess

    net = zoo_like(tmp_path)
    m = tmp_path / "mapping.json"
    m.write_text(json.dumps({"localhost_cpu0": list(net.graph.names)}))
    batch = from_device_lists(net.graph, 2, [[[0]] * len(net.graph)])
    args = ["+net=onnx", f"net.path={tmp_path / 'zoo_like.onnx'}", "platform=localhost"]
    r = subprocess.run(
        [sys.executable, "-m", "dse.deploy", *args, f"mapping={m}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out = tmp_path / "runs" / "deploy" / f"{net.name}-{batch.ident(0)}"
    assert json.loads((out / "plan.json").read_text())["mapping_hash"] == batch.ident(0)
    assert f"to {out.relative_to(tmp_path)} " in r.stdout


def test_rankfile_binds_cpu_threads_and_gpu_host_threads() -> None:
    jetson = load_platform(
        yaml.safe_load((ROOT / "conf/platform/jetson_xavier_nx_x8.yaml").read_text())
    )
    # each board: its 6-thread cpu on cores 0-5, its gpu's host thread beside them on core 5
    assert mpiexec.core_slots(jetson)[:4] == ["0-5", "5", "0-5", "5"]
    # ranks on devices 0 and 1 of xavier0 and device 6 (xavier3's cpu)
    hostfile, rankfile = mpiexec.mpi_files(jetson, [0, 1, 6])
    assert hostfile == "xavier0 slots=2\nxavier3 slots=1\n"
    assert rankfile == ("rank 0=xavier0 slot=0-5\nrank 1=xavier0 slot=5\nrank 2=xavier3 slot=0-5\n")
    # boards known to mpiexec by other names (an emulated cluster): the same slots on them
    boards = mpiexec.Launcher(hosts={"xavier0": "board-a", "xavier3": "10.0.0.4"})
    hostfile, rankfile = mpiexec.mpi_files(jetson, [0, 1, 6], boards)
    assert hostfile == "board-a slots=2\n10.0.0.4 slots=1\n"
    assert rankfile == "rank 0=board-a slot=0-5\nrank 1=board-a slot=5\nrank 2=10.0.0.4 slot=0-5\n"


def test_the_launcher_takes_mpiexec_arguments_environment_and_boards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an emulated cluster adds (a launch agent, a TCP interface, boards by name) reaches
    the command, its environment and run.sh; the default command is as before."""
    for name in [k for k in os.environ if k.startswith("DSE_")]:
        monkeypatch.delenv(name)
    agent = mpiexec.Launcher(
        mpiexec="/opt/mpi/bin/mpiexec",
        args=("--prtemca", "plm_ssh_agent", "/opt/enter-board"),
        env={"OMPI_MCA_btl_tcp_if_include": "10.9.0.0/24"},
    )
    d = tmp_path.resolve()
    cmd = agent.command(tmp_path, 3, warmup=1, rank_args=["--stream", "4"])
    placed = ["--hostfile", f"{d}/hostfile", "--map-by", f"rankfile:file={d}/rankfile"]
    rank = [sys.executable, "-m", "mpi4py", "-m", "dse.runtime", str(d)]
    assert cmd == [
        "/opt/mpi/bin/mpiexec",
        "-n",
        "3",
        *placed,
        "--prtemca",
        "plm_ssh_agent",
        "/opt/enter-board",
        *rank,
        "--warmup",
        "1",
        "--stream",
        "4",
    ]
    env = agent.environment()
    assert env["OMPI_MCA_btl_tcp_if_include"] == "10.9.0.0/24"
    assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"
    assert env["OMPI_MCA_btl_tcp_progress_thread"] == "1"
    script = agent.run_script(cmd, tmp_path)
    assert "\nexport OMPI_MCA_btl_tcp_progress_thread=1\n" in script
    assert "\nexport OMPI_MCA_btl_tcp_if_include=10.9.0.0/24\n" in script
    assert script.endswith(f'exec {" ".join(cmd)} "$@"\n')
    plain = mpiexec.Launcher(mpiexec="mpiexec").command(tmp_path, 2)
    assert plain == ["mpiexec", "-n", "2", *placed, *rank]


def test_the_launcher_forwards_dses_variables_to_other_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank on another host gets the variables the launcher adds and dse's own (``-x``), not
    Open MPI's (which it forwards itself) nor the rest of this environment."""
    for name in [k for k in os.environ if k.startswith("DSE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSE_WAIT_SPIN_US", "50")
    monkeypatch.setenv("UNRELATED_VARIABLE", "1")
    env = {"OMPI_MCA_btl": "tcp,self", "LD_LIBRARY_PATH": "/opt/lib"}
    launcher = mpiexec.Launcher(mpiexec="mpiexec", env=env)
    assert launcher.forwarded() == ["DSE_WAIT_SPIN_US", "LD_LIBRARY_PATH"]
    cmd = launcher.mpiexec_command(2, tmp_path, ["prog"])
    assert cmd[:3] == ["mpiexec", "-n", "2"] and cmd[-1] == "prog"
    assert cmd[7:11] == ["-x", "DSE_WAIT_SPIN_US", "-x", "LD_LIBRARY_PATH"]


SENDER_WAITS = """
import sys, time
from pathlib import Path
import numpy as np
from mpi4py import MPI
comm, flag = MPI.COMM_WORLD, Path(sys.argv[1])
buf = np.arange(2_000_000, dtype=np.float32)  # 8 MB: far above TCP's eager limit
if comm.Get_rank() == 0:
    req = comm.Isend(buf, dest=1, tag=7)
    end = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < end:  # no MPI call in here
        time.sleep(0.001)
    req.Wait()
    print("moved" if flag.exists() else "stuck", flush=True)
else:
    got = np.empty_like(buf)
    comm.Recv(got, source=0, tag=7)
    flag.write_text(str(int(np.array_equal(got, buf))))
"""


@pytest.mark.mpi
def test_a_message_between_hosts_moves_while_its_sender_makes_no_mpi_call(
    tmp_path: Path,
) -> None:
    """Two ranks over TCP, as on two hosts, in the launcher's environment: rank 0 sends 8 MB,
    then makes no MPI call (as while it runs a sub-model) until rank 1 has the whole message
    and says so through a file. Without Open MPI's TCP progress thread (``MPI_ENV``) the
    message waits for rank 0's next MPI call, and rank 0 gives up after 60 s: "stuck"."""
    prog = tmp_path / "sender_waits.py"
    prog.write_text(SENDER_WAITS)
    flag = tmp_path / "received"
    cmd = [mpiexec.mpiexec_path(), "-n", "2", "--mca", "btl", "tcp,self",
           sys.executable, str(prog), str(flag)]  # fmt: skip
    env = mpiexec.Launcher().environment()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["moved"]
    assert flag.read_text() == "1"  # and every byte arrived


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("pmix", "The PMIx server's listener thread failed to start (Open MPI, in stderr.log)"),
        ("daemon", "A daemon failed to report back after being spawned (Open MPI, in stdout.log)"),
    ],
)
def test_a_launch_that_fails_at_startup_is_started_again(
    tmp_path: Path, localhost, message: str, said: str
) -> None:
    """Two startup failures, then a run: measured, on the third launch; three failures: the
    run fails, naming Open MPI's message, where it printed it, and the launches."""
    net = zoo_like(tmp_path)
    out = tmp_path / "aba"
    deploy(net, localhost, aba_batch(net), out, warmup=1, iterations=2)
    launcher = mpiexec.Launcher(mpiexec=flaky_mpiexec(tmp_path, failures=2, message=message))
    r = launch(out, timeout_s=120, launcher=launcher)
    assert r.status == "ok", r.reason
    assert (tmp_path / "launches").read_text().strip() == "3"
    (tmp_path / "launches").unlink()
    launcher = mpiexec.Launcher(mpiexec=flaky_mpiexec(tmp_path, failures=3, message=message))
    r = launch(out, timeout_s=120, launcher=launcher)
    assert r.status == "failed"
    assert r.reason == f"mpiexec exited with 213: {said} (3 launches)"
    assert (tmp_path / "launches").read_text().strip() == "3"


@pytest.mark.mpi
def test_a_rank_failure_is_not_started_again(tmp_path: Path, localhost) -> None:
    """A rank that dies is a failure of the mapping, not of the launcher: one launch."""
    net = zoo_like(tmp_path)
    out = tmp_path / "killed"
    deploy(net, localhost, aba_batch(net), out, warmup=1, iterations=50)
    launcher = mpiexec.Launcher(mpiexec=flaky_mpiexec(tmp_path, failures=0))
    r = launch(out, timeout_s=120, rank_args=["--kill-rank", "1"], launcher=launcher)
    assert r.status == "failed" and "launches" not in r.reason
    assert (tmp_path / "launches").read_text().strip() == "1"


def relay(tmp_path: Path, hops: int = 4) -> Net:
    """Relu x ``hops`` on a 4 MiB tensor, in file order (placed a, b, a, b: each hop but the
    last, the output, sends 4 MiB)."""
    nodes, prev = [], "x"
    for i in range(hops):
        nodes.append(helper.make_node("Relu", [prev], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    path = tmp_path / "relay.onnx"
    onnx.save(onnx_factory.model(nodes, {"x": [1, 4, 512, 512]}, [prev]), path)
    return load_net({"name": "onnx", "path": str(path), "order": "file"})


@pytest.mark.mpi
def test_the_running_peak_is_one_inferences_and_the_stream_has_its_own(
    tmp_path: Path, localhost
) -> None:
    """A stream holds several frames' sent tensors at once (up to its window): the running
    peak, which the model predicts, is read before it; the same deployment measured without
    a stream is the independent figure."""
    net = relay(tmp_path)
    n = len(net.graph)
    batch = from_device_lists(net.graph, 2, [[[i % 2] for i in range(n)]])
    peaks = {}
    for stream in (0, 12):
        out = tmp_path / f"stream{stream}"
        deploy(net, localhost, batch, out, warmup=1, iterations=3, stream=stream)
        r = launch(out, timeout_s=120)
        assert r.status == "ok", r.reason
        peaks[stream] = {x.rank: x for x in r.ranks}
    for rank in (0, 1):
        plain, streamed = peaks[0][rank], peaks[12][rank]
        assert plain.peak_rss_stream_mb is None
        # a frame's sends are held until the window (4 frames) moves on: at least 3 more
        # frames' than in one inference (rank 0 sends 8 MiB per frame, rank 1 4 MiB)
        extra = 3 * streamed.bytes_sent / 2**20
        assert streamed.peak_rss_stream_mb >= streamed.peak_rss_running_mb + extra
        assert abs(streamed.peak_rss_running_mb - plain.peak_rss_running_mb) < 8


@pytest.mark.mpi
def test_a_measured_deployment_names_the_coefficients_it_predicts_with(tmp_path: Path) -> None:
    """measure=true prints the prediction beside the measurement: which coefficients made it
    and how they were obtained (a quick calibration is named as one)."""
    net = zoo_like(tmp_path)
    m = tmp_path / "mapping.json"
    m.write_text(json.dumps({"localhost_cpu0": list(net.graph.names)}))
    doc = json.loads((ROOT / "conf/platform/localhost.json").read_text())
    doc |= {"calibrated": True, "provenance": {"date": "2026-05-09T12:00:00+00:00"}}
    doc["provenance"] |= {"host": "box", "quick": True}
    quick = tmp_path / "quick.json"
    quick.write_text(json.dumps(doc))
    r = run_module(
        "dse.deploy", "+net=onnx", f"net.path={tmp_path / 'zoo_like.onnx'}",
        "platform=localhost", f"mapping={m}", f"out={tmp_path / 'dep'}", "measure=true",
        "warmup=0", "iterations=1", f"coefficients={quick}", env={"TZ": "UTC"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == (
        f"coefficients: {quick} (calibrated (quick: a smoke test) on box 2026-05-09 12:00; "
        "not for predictions: calibrate without quick=true)"
    )
