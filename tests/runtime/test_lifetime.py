"""Nothing outlives the process that launched it: a deploy killed outright (SIGKILL) or by a
closed terminal (SIGHUP) leaves no mpiexec and no rank; temporary directories and sub-models of
a killed process are removed at the next start, those of a live one never; Ctrl-C in phase two
leaves no sub-model.

Processes are found through /proc by a marker unique to the test (its temporary directory in
their command line), not through dse's own code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dse.errors import DseError
from dse.files import LEFTOVERS, LOCK, owned, remove_dead_scratch
from dse.mapping import to_autodice
from tests.helpers.cli import ROOT, as_from_a_terminal, processes_naming, wait_until
from tests.helpers.nets import aba_batch, zoo_like


def start_deploy(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """`python -m dse.deploy measure=true` of an A -> B -> A mapping on localhost, running
    far longer than any test (10^8 iterations), with its ranks started."""
    net = zoo_like(tmp_path)
    mapping, _ = to_autodice(net.graph, ["localhost_cpu0", "localhost_cpu1"], aba_batch(net))
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    out = tmp_path / "dep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dse.deploy", "+net=onnx", f"net.path={tmp_path / 'zoo_like.onnx'}",
         "platform=localhost", f"mapping={tmp_path / 'mapping.json'}", f"out={out}",
         "measure=true", "warmup=0", "iterations=100000000", "timeout_s=600"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    ranks = f"dse.runtime {out}"
    if not wait_until(lambda: len(processes_naming(ranks)) >= 2 or proc.poll() is not None, 240):
        proc.kill()
        pytest.fail(f"the ranks never started: {proc.communicate()}")
    assert proc.poll() is None, proc.communicate()
    return proc, out


@pytest.mark.mpi
@pytest.mark.slow
def test_a_deploy_killed_outright_leaves_no_mpi_process(tmp_path: Path) -> None:
    proc, out = start_deploy(tmp_path)
    assert any("mpiexec" in c or "prterun" in c for c in processes_naming(str(out)))
    proc.kill()
    proc.wait()
    assert wait_until(lambda: not processes_naming(str(out)), 10), processes_naming(str(out))


@pytest.mark.mpi
@pytest.mark.slow
def test_a_closed_terminal_stops_a_deploy_cleanly(tmp_path: Path) -> None:
    """SIGHUP is Ctrl-C: one line, status 130, no process left, the deployment intact."""
    proc, out = start_deploy(tmp_path)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "error: interrupted", err
    assert wait_until(lambda: not processes_naming(str(out)), 10), processes_naming(str(out))
    assert json.loads((out / "plan.json").read_text())["ranks"]
    assert not (out / "measurements.json").exists()


#: A process that starts a sleeping child as dse starts mpiexec, prints its pid, then waits for it.
PARENT = """
import subprocess, sys
from dse.lifetime import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]],
                         start_new_session=True,
                         preexec_fn=die_with_parent())
print(child.pid, flush=True)
child.wait()
"""


def test_a_child_dies_with_its_parent_even_in_its_own_session(tmp_path: Path) -> None:
    marker = f"{tmp_path}/marker"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, marker], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    pid = int(parent.stdout.readline())
    assert processes_naming(marker) and os.getsid(pid) == pid  # its own session, as mpiexec
    parent.kill()
    parent.wait()
    assert wait_until(lambda: not processes_naming(marker), 5), processes_naming(marker)


#: A process that makes a scratch directory and marks a file of ``directory`` temporary, says
#: so, and waits to be killed (no cleanup of its own runs).
HOLDER = """
import sys, time
from pathlib import Path
from dse.files import scratch, temporary_files
with scratch("held-") as d, temporary_files(Path(sys.argv[1]), ["*.onnx"]):
    (d / "half.onnx").write_bytes(b"x" * 1000)
    print(d, flush=True)
    time.sleep(300)
"""


def hold(tmp: Path, directory: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    return proc, Path(proc.stdout.readline().strip())


def test_temporary_files_of_a_killed_process_go_at_the_next_start(tmp_path: Path) -> None:
    """A scratch directory and the sub-models noted for removal stay while their owner lives,
    whatever their age, and go at the next start once it is dead; other directories in the
    temporary folder (one with no owner lock, one not private, another program's) stay."""
    tmp, deployment = tmp_path / "tmp", tmp_path / "phase2" / "front_1"
    tmp.mkdir()
    deployment.mkdir(parents=True)
    for name in ("rank0_seg0.onnx", "plan.json", "measurements.json"):
        (deployment / name).write_text("{}")
    others = [tmp / "dse-no-lock", tmp / "dse-public", tmp / "another-program"]
    for d in others:
        d.mkdir(mode=0o700)
        (d / ".dse.lock").write_text('{"pid": 1}')
    (others[0] / ".dse.lock").unlink()
    others[1].chmod(0o755)
    live, live_dir = hold(tmp, tmp_path / "elsewhere")
    dead, dead_dir = hold(tmp, deployment)
    try:
        week_ago = time.time() - 7 * 86400
        for d in tmp.iterdir():
            os.utime(d, (week_ago, week_ago))
        assert remove_dead_scratch(tmp) == []  # both owners live
        dead.kill()
        dead.wait()
        notes = {
            json.loads((p / LEFTOVERS).read_text())["directory"]: p
            for p in tmp.iterdir()
            if (p / LEFTOVERS).is_file()
        }
        assert set(notes) == {str(deployment), str(tmp_path / "elsewhere")}
        assert dead_dir.is_dir() and (deployment / "rank0_seg0.onnx").is_file()  # no cleanup ran
        assert sorted(remove_dead_scratch(tmp)) == sorted([dead_dir, notes[str(deployment)]])
        assert sorted(p.name for p in deployment.iterdir()) == ["measurements.json", "plan.json"]
        assert sorted(tmp.iterdir()) == sorted(
            [*others, live_dir, notes[str(tmp_path / "elsewhere")]]
        )
        assert (live_dir / "half.onnx").is_file()
    finally:
        live.kill()
        live.wait()


def test_phase_two_interrupted_leaves_no_submodel(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C while a mapping runs: its deployment keeps its plan, loses its sub-models; the
    rows measured before it are in phase2.csv."""
    import yaml

    from dse.config import Phase2Config
    from dse.measuring import phase2, rounds
    from dse.platform import load_platform
    from dse.runtime.deployment.measurements import Measurement
    from models_analytical.coefficients import load_coefficients
    from models_analytical.model import AnalyticalModel

    net = zoo_like(tmp_path)
    plat = load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))
    model = AnalyticalModel(
        net.graph, plat, load_coefficients(ROOT / "conf/platform/localhost.json")
    )
    calls = []

    def measured_then_stopped(out, *args, **kwargs):  # noqa: ANN001
        calls.append(out)
        assert list(out.glob("*.onnx"))  # deployed, its sub-models there while it runs
        if len(calls) == 2:
            raise KeyboardInterrupt
        return Measurement.failed("not run in this test")

    monkeypatch.setattr(rounds, "launch", measured_then_stopped)
    two = aba_batch(net).take([0, 0])
    with pytest.raises(KeyboardInterrupt):
        phase2.measure_phase2(tmp_path / "run", net, plat, model, two, ["a", "b"],
                              Phase2Config(), launcher=None)  # fmt: skip
    for d in calls:
        assert (d / "plan.json").is_file() and not list(d.glob("*.onnx*")), list(d.iterdir())
    table = (tmp_path / "run" / "phase2.csv").read_text().splitlines()
    ran, stopped = (calls[0].name, calls[1].name)
    assert table[1 + ["a", "b"].index(ran)].startswith(f"{ran},failed,not run in this test")
    assert table[1 + ["a", "b"].index(stopped)].startswith(f"{stopped},failed,interrupted")
    assert not [p for p in (tmp_path / "run" / "phase2").iterdir() if p.name.endswith(".tmp")]


def test_no_temporary_folder_is_one_line(tmp_path: Path, monkeypatch) -> None:
    from dse.files import scratch

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "missing" / "tmp"))
    with (
        pytest.raises(DseError, match="cannot make a temporary directory in .*set TMPDIR"),
        scratch("x-"),
    ):
        pass


def test_a_second_owner_told_to_wait_waits_for_the_first(tmp_path: Path) -> None:
    """``owned(d, waiting=...)`` while another process owns ``d``: told who (its pid), it waits,
    and owns ``d`` once that process has ended; the lock file then names it."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from dse.files import owned\n"
         f"with owned({str(tmp_path)!r}):\n    print('held', flush=True); sys.stdin.readline()\n"
         "    print(time.time(), flush=True)"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    told: list[str] = []

    def waiting(who: str) -> None:
        told.append(who)
        holder.stdin.close()  # the owner finishes once we wait

    try:
        assert holder.stdout.readline().strip() == "held"
        with owned(tmp_path, "directory", waiting):
            owned_at = time.time()
            released_after = float(holder.stdout.readline())  # the holder's last moment as owner
            assert owned_at > released_after
            assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
        assert len(told) == 1 and told[0].startswith(f"pid {holder.pid} on ")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
