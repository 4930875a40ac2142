"""What a run promises under interruption: complete outputs, exact resume, safe checkpoints."""

from __future__ import annotations

import csv
import io
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dse.files import remove_stale
from tests.helpers.cli import ROOT, as_from_a_terminal, run_module

#: A run long enough to be interrupted: about 3 s of search after start-up.
LONG = ["+net=alexnet", "algorithm.pop_size=60", "algorithm.n_gen=300", "seed=5"]


def start(out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dse", "progress=false", *args, f"hydra.run.dir={out}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)


def front(out: Path) -> list[tuple[str, ...]]:
    with open(out / "pareto.csv") as fh:
        rows = list(csv.DictReader(fh))
    cols = [c for c in rows[0] if c.split("_")[0] in ("latency", "memory", "energy")]
    return sorted(tuple(r[c] for c in cols) for r in rows)


def assert_complete(out: Path, killed: bool = False) -> dict | None:
    """Either no summary (outputs not written yet) or a summary beside complete outputs from the
    same generation; never a half-written file, and after a clean stop no temporary file (a
    SIGKILL mid-write can leave one beside the intact old file; the next run removes it)."""
    if not killed:
        assert not list(out.rglob(".*.tmp")), list(out.rglob(".*.tmp"))
    if (out / "checkpoint.npz").exists():
        with np.load(out / "checkpoint.npz", allow_pickle=False) as z:
            assert z["X"].ndim == 2
    if not (out / "summary.json").exists():
        return None
    summary = json.loads((out / "summary.json").read_text())
    history = list(csv.DictReader((out / "history.csv").read_text().splitlines()))
    assert int(history[-1]["generation"]) == summary["generations"]
    assert len(front(out)) == summary["pareto_points"]
    for png in ("convergence.png", "pareto.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / png).read_bytes()[-8:-4] == b"IEND"
    for d in ("best_latency", "best_memory", "best_energy"):
        json.loads((out / d / "mapping.json").read_text())
    return summary


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full") / "run"
    proc = start(out, *LONG)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
@pytest.mark.slow
def test_signal_at_any_moment_leaves_complete_outputs_and_resume_is_exact(
    sig, tmp_path, uninterrupted
):
    rng = random.Random(int(sig))
    for attempt in range(2):  # two random moments per signal, eight in all
        out = tmp_path / f"run{attempt}"
        proc = start(out, *LONG)
        wait_for(out / "checkpoint.npz", proc)
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        if sig == signal.SIGKILL:
            assert proc.returncode in (-signal.SIGKILL, 0), err  # 0: it finished before
        else:
            assert proc.returncode in (130, 0), err  # 0: it finished before the signal
            if proc.returncode == 130:
                assert err.strip().splitlines()[-1].endswith(f"python -m dse resume={out}")
                summary = assert_complete(out)
                # interrupted, or complete when the signal came while its outputs were written
                assert summary is not None
                assert summary["interrupted"] or summary["generations"] == 300
        assert_complete(out, killed=proc.returncode == -signal.SIGKILL)
        # resume with nothing but the directory: the run's own settings, to its own n_gen
        r = run_module("dse", "progress=false", f"resume={out}")
        assert r.returncode == 0, r.stderr
        summary = assert_complete(out)
        assert summary["generations"] == 300 and not summary["interrupted"]
        assert front(out) == front(uninterrupted)


def test_a_signal_after_the_outputs_were_written_says_they_are_complete(tmp_path):
    """A stop signal after the outputs (while the last lines are printed, or later before the
    process ends) ends it with the interrupted status and the line that says the outputs are
    complete and how to continue, not a bare "error: interrupted". The signal's moment is
    made exact: the run's last line raises KeyboardInterrupt, as SIGINT there would."""
    out = tmp_path / "run"
    script = (
        "import sys\n"
        "import dse.__main__ as m\n"
        "from dse.cli import run\n"
        "said = m.say\n"
        "def say(message, error=False):\n"
        "    if 'Pareto points ->' in message:\n"
        "        raise KeyboardInterrupt\n"
        "    said(message, error)\n"
        "m.say = say\n"
        "sys.argv = ['dse', *sys.argv[1:]]\n"
        "run(m.main)\n"
    )
    args = ["+net=alexnet", "algorithm.pop_size=20", "algorithm.n_gen=3", "progress=false"]
    proc = subprocess.run(
        [sys.executable, "-c", script, *args, f"hydra.run.dir={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 130, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted after the outputs of generation 3 were written")
    assert last.endswith(f"python -m dse resume={out}")
    summary = assert_complete(out)
    assert summary is not None and summary["generations"] == 3 and not summary["interrupted"]


def test_resuming_a_finished_run_runs_nothing(uninterrupted, tmp_path):
    before = json.loads((uninterrupted / "summary.json").read_text())
    r = run_module("dse", "progress=false", f"resume={uninterrupted}")
    assert r.returncode == 0, r.stderr
    after = json.loads((uninterrupted / "summary.json").read_text())
    assert after["generations"] == before["generations"] == 300
    assert after["evaluations"] == before["evaluations"]


class Payload:
    """Unpickling this runs a command: what a crafted checkpoint would try."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _npy(shape: tuple[int, ...], payload: bytes) -> bytes:
    """A .npy file whose header declares ``shape`` (float64), followed by ``payload``."""
    buf = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + payload


@pytest.mark.parametrize(
    "form", ["pickle", "object_array", "garbage", "empty", "inflated_header", "zip_bomb"]
)
def test_crafted_checkpoint_executes_nothing(form, tmp_path):
    out, marker = tmp_path / "run", tmp_path / "pwned"
    out.mkdir()
    path = out / "checkpoint.npz"
    if form == "pickle":
        path.write_bytes(pickle.dumps(Payload(marker)))
    elif form == "object_array":
        arr = np.empty(1, dtype=object)
        arr[0] = Payload(marker)
        with open(path, "wb") as fh:
            np.savez(fh, meta=arr, X=arr)
    elif form == "garbage":
        path.write_bytes(os.urandom(4096))
    elif form == "inflated_header":  # 80 GB declared, 100 bytes held: never allocated
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("X.npy", _npy((10**10,), bytes(100)))
    elif form == "zip_bomb":  # 64 MiB of zeros in a 64 KiB file
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("X.npy", _npy((8 << 20,), bytes(64 << 20)))
    else:
        path.write_bytes(b"")
    r = run_module("dse", "progress=false", f"resume={out}")
    assert not marker.exists()
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a readable dse checkpoint" in lines[0], r.stderr


def test_two_runs_started_at_once_get_two_directories(tmp_path):
    args = [sys.executable, "-m", "dse", "progress=false", "+net=alexnet"]
    args += ["algorithm.pop_size=10", "algorithm.n_gen=2"]
    procs = [
        subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    os.chdir(ROOT)
    dirs = [p.parent for p in (tmp_path / "runs").rglob("summary.json")]
    assert len(dirs) == 2 and dirs[0] != dirs[1]


def test_resume_refuses_another_network_and_changed_settings(uninterrupted):
    for args, what in (
        (["+net=vgg16"], "+net=vgg16 changes net"),
        (["algorithm.pop_size=20"], "changes algorithm.pop_size"),
        (["chromosome=naive"], "changes chromosome"),
    ):
        r = run_module("dse", *args, f"resume={uninterrupted}")
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and what in r.stderr, r.stderr


def test_a_signal_while_outputs_are_written_stops_the_sweep(tmp_path):
    """Ctrl-C that lands while a run writes its outputs (after its last generation): the
    outputs are complete, the run exits 130, and a multirun starts no further job."""
    script = tmp_path / "late_signal.py"
    script.write_text(
        "import os, signal, sys\n"
        "import dse.__main__ as m\n"
        "import dse.search.workflow as w\n"
        "original = w.write_outputs\n"
        "def writing(*args, **kwargs):\n"
        "    if not kwargs and len(args) == 7:  # the search's outputs, not phase two's\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return original(*args, **kwargs)\n"
        "w.write_outputs = writing\n"
        "sys.argv = [sys.argv[0], *sys.argv[1:]]\n"
        "m.run(m.main)\n"
    )
    sweep = tmp_path / "sweep"
    r = subprocess.run(
        [sys.executable, str(script), "--multirun", "progress=false", "+net=alexnet",
         "algorithm.pop_size=10", "algorithm.n_gen=2", "seed=1,2,3", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 130, r.stderr[-2000:]
    assert json.loads((sweep / "0" / "summary.json").read_text())["generations"] == 2
    assert not (sweep / "1").exists() and not (sweep / "2").exists()


def test_a_run_directory_has_one_writer(tmp_path):
    """While a run writes its directory, a second run into it and a resume of it are refused
    in one line naming the owner; a lock left by a killed run is taken over."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "dse", "progress=false", "+net=alexnet", f"hydra.run.dir={out}"]
    first = subprocess.Popen(
        [*args, "algorithm.pop_size=100", "algorithm.n_gen=100000"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 120
        while not (out / "checkpoint.npz").exists() and time.time() < deadline:
            time.sleep(0.2)
        for extra in (["algorithm.n_gen=2"], []):
            r = subprocess.run(
                [*args, *extra] if extra else [*args[:3], f"resume={out}"],
                cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1, r.stderr
            assert f"is in use by pid {first.pid}" in lines[0]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    # the killed run's lock file is still there; the kernel's lock died with it
    assert (out / ".dse.lock").is_file()
    r = subprocess.run(
        [*args, "algorithm.pop_size=10", "algorithm.n_gen=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["generations"] == 2


def test_a_resumed_run_removes_what_a_killed_writer_left_in_any_of_its_directories(tmp_path):
    """A SIGKILL while the run wrote ``best_latency/mapping.json`` left its temporary file
    there, and the resumed run, which looked only at the top directory, kept it (CI,
    2026-12-04). Such files go at any depth; the rest stays, a deployment's temporary
    directory included (dse.files.temporary_files removes that)."""
    stale = [
        tmp_path / ".pareto.csv.a1b2.tmp",
        tmp_path / "best_latency" / ".mapping.json.itaxx2e1.tmp",
    ]
    kept = [
        tmp_path / "pareto.csv",
        tmp_path / "best_latency" / "mapping.json",
        tmp_path / "best_latency" / ".hidden",
        tmp_path / "phase2" / "front_0" / "plan.json",
        tmp_path / "phase2" / ".front_0.x9y8.tmp" / "plan.json",
    ]
    for p in stale + kept:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    remove_stale(tmp_path)
    left = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(p.relative_to(tmp_path) for p in kept)


@pytest.mark.parametrize(
    "module, heavy",
    [(m, "hydra") for m in ("dse", "dse.evaluate", "dse.inspect", "dse.deploy")]
    + [(m, "hydra") for m in ("dse.calibrate", "dse.fidelity", "dse.cluster")]
    + [("dse.compare", "numpy"), ("dse.config_reference", "yaml")],
)
def test_ctrl_c_while_an_entry_point_loads_is_one_line(module, heavy):
    """Ctrl-C in the first half second, while the entry point imports its libraries: "error:
    interrupted" and the interrupted status, not a KeyboardInterrupt traceback. The moment is
    made exact: SIGINT is sent as the first import of ``heavy`` starts."""
    script = (
        "import os, runpy, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "class Trap:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == '{heavy}':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Trap())\n"
        f"sys.argv = ['{module}']\n"
        f"runpy.run_module('{module}', run_name='__main__', alter_sys=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (proc.returncode, proc.stderr) == (130, "error: interrupted\n")
