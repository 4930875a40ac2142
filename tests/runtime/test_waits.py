"""How ranks wait (dse.runtime.rank.waits): the setting, the non-blocking path with a stand-in
communicator, and real runs under mpiexec that poll then sleep, checked against onnxruntime's
outputs of the whole model as the other runtime tests are."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.platform import load_platform
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import launch
from dse.runtime.rank import waits
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers.cli import ROOT
from tests.helpers.nets import zoo_like
from tests.helpers.partition import RTOL


def test_the_setting_is_spin_or_microseconds(monkeypatch) -> None:
    monkeypatch.delenv("DSE_WAIT_SPIN_US", raising=False)
    assert waits.spin_s() is None
    assert waits.spin_s(" spin ") is None
    assert waits.spin_s("50") == pytest.approx(50e-6)
    assert waits.spin_s("0") == 0.0
    monkeypatch.setenv("DSE_WAIT_SPIN_US", "200")
    assert waits.spin_s() == pytest.approx(200e-6)
    for bad in ("fast", "-1", "nan", "inf", ""):
        with pytest.raises(DseError) as err:
            waits.spin_s(bad)
        assert str(err.value) == (
            f"DSE_WAIT_SPIN_US={bad!r} must be microseconds (0 to 1e9) or 'spin'"
        )


class Request:
    """A request that completes at its ``n``-th test."""

    def __init__(self, n: int) -> None:
        self.left = n

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        self.left -= 1
        return self.left <= 0


class Comm:
    """Records which calls a rank made: blocking ones fail the test."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.probes = 0

    def Iprobe(self, source: int, tag: int) -> bool:  # noqa: N802
        self.probes += 1
        self.calls.append("Iprobe")
        return self.probes >= 5

    def Irecv(self, buf, source: int, tag: int) -> Request:  # noqa: N802
        self.calls.append("Irecv")
        buf[...] = 7
        return Request(3)

    def Ibarrier(self) -> Request:  # noqa: N802
        self.calls.append("Ibarrier")
        return Request(2)

    def __getattr__(self, name: str):
        raise AssertionError(f"a sleeping wait called the blocking {name}")


def test_polling_waits_use_only_non_blocking_calls() -> None:
    import numpy as np

    comm = Comm()
    w = waits.Waits(comm, 0.0)
    w.probe(1, 5)
    assert comm.calls == ["Iprobe"] * 5  # until the message is there
    buf = np.zeros(4, dtype=np.float32)
    w.recv(buf, 1, 5)
    assert comm.calls[5:] == ["Irecv"] and buf.tolist() == [7.0] * 4
    w.barrier()
    assert comm.calls[-1] == "Ibarrier"


@pytest.fixture(scope="module")
def localhost():
    return load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))


@pytest.mark.mpi
@pytest.mark.parametrize("spin_us", ["0", "50"])
def test_ranks_that_poll_then_sleep_give_the_whole_models_outputs(
    tmp_path: Path, localhost, monkeypatch, spin_us: str
) -> None:
    """A LOP mapping (every splittable layer over both ranks: parts received and gathered) and
    an A -> B -> A mapping streamed (several frames' sends in flight), their ranks waiting the
    non-blocking way: the outputs are the whole model's, each rank sent the model's bytes."""
    monkeypatch.setenv("DSE_WAIT_SPIN_US", spin_us)  # the ranks inherit mpiexec's environment
    net = zoo_like(tmp_path)
    n = len(net.graph)
    lop = from_device_lists(net.graph, 2, [[[0, 1] if net.graph.splittable[i] else [0]
                                            for i in range(n)]])  # fmt: skip
    aba = from_device_lists(net.graph, 2, [[[i % 2] for i in range(n)]])
    model = AnalyticalModel(
        net.graph, localhost, load_coefficients(ROOT / "conf/platform/localhost.json")
    )
    for name, batch in (("lop", lop), ("aba", aba)):
        deploy(net, localhost, batch, tmp_path / name, warmup=1, iterations=3, stream=6)
        r = launch(tmp_path / name, timeout_s=120)
        assert r.status == "ok", r.reason
        assert r.equivalence.passed and r.equivalence.max_rel_error <= RTOL
        assert r.stream.frames == 6 and r.stream.period_ms > 0
        assert [x.bytes_sent for x in r.ranks] == [
            int(b) for b in model.evaluate(batch).bytes_sent[0]
        ]
        for x in r.ranks:  # the rank's CPU time and time ready but not running, per iteration
            assert x.cpu_ms.median > 0 and x.runnable_ms.median >= 0


class Pacing:
    """A stand-in :class:`dse.runtime.rank.pace.Pace`: its run-queue clock advances 1 ms at each
    read, and it records what waits report idle."""

    def __init__(self) -> None:
        self.clock, self.idle = 0.0, []

    def queued_s(self) -> float:
        self.clock += 1e-3
        return self.clock

    def slept(self, idle_s: float) -> None:
        self.idle.append(idle_s)


def test_a_wait_reports_its_queueing_before_its_last_sleep_as_idle() -> None:
    p = Pacing()
    waits.until(Request(4).Test, 0.0, p)  # not done at the first 3 tests: slept twice
    # read at the start (1 ms), before the first sleep (2 ms) and before the last (3 ms):
    # idle is the queueing from the start to the last sleep, 2 ms
    assert p.idle == [pytest.approx(2e-3)]
    p.idle.clear()
    waits.until(Request(1).Test, 0.0, p)  # done at once: never slept, nothing reported
    waits.until(Request(2).Test, 1.0, p)  # done while it polled (spin 1 s): nothing either
    assert p.idle == []
