"""The machine's speed at a moment: the whole network, alone, timed on each core its ranks use.

A shared machine's speed drifts, and a core itself can run slower (CPU time equal to wall time),
which no scheduling removes: a latency measured now and one measured at calibration compare only
at the same speed. A probe times the same work (the deployment's whole model in onnxruntime, at
the devices' thread count) between runs; :func:`dse.measuring.rounds.measure_interleaved` calls
it before the first run and after every run, so each run has a probe on either side, and
:func:`dse.measuring.rounds.take_out_drift` scales each run by the speed they show. The probe
runs in the launching process while no rank runs: it measures the machine, never competes with a
measurement. It measures this machine only, so a platform with no cpu device here gets none
(:func:`speed_probe`). An emulated cluster's boards are this machine's cores (the launcher's
``local_cores``): the probe times those cores outside the boards' cgroups, the speed every CPU
share of them follows.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dse.platform import Platform
from dse.runtime.deployment.plan import input_arrays
from dse.runtime.deployment.reader import read_plan, whole_model
from dse.runtime.launch.deploy import whole_model_session
from dse.runtime.launch.mpiexec import Launcher, core_slots
from dse.runtime.rank.sessions import session

#: A probe times this much work per core set (at least one run of the model).
PROBE_S = 0.12
LOCAL_HOSTS = {"localhost", "127.0.0.1", socket.gethostname()}


def probe_threads(platform: Platform) -> int:
    """The thread count the probe runs at: the first cpu device's (calibration profiles at it)."""
    return next((d.threads for d in platform.devices if d.kind == "cpu"), 1)


def probe_cores(platform: Platform, launcher: Launcher | None = None) -> list[set[int]]:
    """The core sets of the platform's cpu devices on this machine, once each: a local
    host's device's binding, an emulated board's cores (``launcher.local_cores``: all of
    them, its devices share them); ``[]`` when none is here."""
    local = launcher.local_cores if launcher is not None else {}
    allowed = os.sched_getaffinity(0)
    cores: list[set[int]] = []
    for dev, slot in zip(platform.devices, core_slots(platform), strict=True):
        if dev.kind != "cpu":
            continue
        if dev.host in local:
            s = set(local[dev.host]) & allowed
        elif dev.host in LOCAL_HOSTS:
            lo, _, hi = slot.partition("-")
            s = set(range(int(lo), int(hi or lo) + 1)) & allowed
        else:
            continue
        if s and s not in cores:
            cores.append(s)
    return cores


def speed_probe(
    directory: Path, platform: Platform, launcher: Launcher | None = None
) -> SpeedProbe | None:
    """A probe of the whole model of the deployment in ``directory``, or None when no cpu
    device of ``platform`` is on this machine (the probe would time the wrong one); an
    emulated cluster's launcher names its boards' cores (:func:`probe_cores`)."""
    cores = probe_cores(platform, launcher)
    return SpeedProbe(Path(directory), cores, probe_threads(platform)) if cores else None


class SpeedProbe:
    """``probe()`` -> the median time (ms) of the whole model over a few runs on each core set.

    Built from one deployment directory (its ``plan.json`` names the whole model and the
    input); every deployment of the same network shares the probe. The sessions load at the
    first call (inside the measurement, so Ctrl-C there is the measurement's); each core set
    gets its own, created while this thread is bound to it, so onnxruntime's worker threads
    (more than one thread per device) are bound to it too."""

    def __init__(self, source: Path, cores: list[set[int]], threads: int) -> None:
        self.source, self.cores, self.threads = source, cores, threads  # source: the deployment
        self.sessions: list[Any] = []
        self.repeats = 1

    def _open(self) -> tuple[Callable[[int], Any], dict[str, np.ndarray]]:
        """A maker of the whole model's session (at a thread count), and its input."""
        plan = read_plan(self.source)
        path = whole_model(plan, self.source)
        return lambda threads: whole_model_session(plan, path, threads), input_arrays(plan)

    def _load(self) -> None:
        make, self.feeds = self._open()
        shared = None if self.threads > 1 else make(1)
        for cores in self.cores:
            with _bound(cores):
                self.sessions.append(shared or make(self.threads))
        with _bound(self.cores[0]):
            self.sessions[0].run(None, self.feeds)  # the first run pays for allocation
            t0 = time.perf_counter()
            self.sessions[0].run(None, self.feeds)
            self.repeats = int(np.clip(round(PROBE_S / (time.perf_counter() - t0)), 1, 8))

    def __call__(self) -> float:
        if not self.sessions:
            self._load()
        times = []
        for cores, whole in zip(self.cores, self.sessions, strict=True):
            with _bound(cores):
                for _ in range(self.repeats):
                    t0 = time.perf_counter()
                    whole.run(None, self.feeds)
                    times.append(time.perf_counter() - t0)
        return float(np.median(times) * 1e3)


class FileProbe(SpeedProbe):
    """A :class:`SpeedProbe` of an ONNX file (``source``: a zoo network's seeded model) rather
    than of a deployment, on a standard normal input from seed 0 (a symbolic dimension: 1)."""

    def _open(self) -> tuple[Callable[[int], Any], dict[str, np.ndarray]]:
        first = session(str(self.source), "cpu", 1)  # its inputs; and the one-thread session
        ports = first.get_inputs()
        rng = np.random.default_rng(0)
        shapes = [[d if isinstance(d, int) else 1 for d in p.shape] for p in ports]

        def make(threads: int) -> Any:
            return first if threads == 1 else session(str(self.source), "cpu", threads)

        return make, {
            p.name: rng.standard_normal(shape).astype(np.float32)
            for p, shape in zip(ports, shapes, strict=True)
        }


class CalibratedSpeed:
    """``()`` -> how much slower than at calibration the machine runs now (1.0: as then): the
    median over calibrated networks of each one's probe now over its probe then.

    For a network calibration never probed (one held out of it), whose own probe has nothing
    to compare with. Whole networks' speeds move together only in part (a memory-bound network
    follows the machine differently from a compute-bound one): the median over several damps
    each one's own swings."""

    def __init__(self, probes: dict[str, tuple[SpeedProbe, float]]) -> None:
        self.probes = probes  # network -> (its probe, its calibration probe in ms)
        self.factors: list[float] = []  # each call's, in order

    def __call__(self) -> float:
        ratios = [probe() / then for probe, then in self.probes.values()]
        self.factors.append(float(np.median(ratios)))
        return self.factors[-1]


@contextlib.contextmanager
def _bound(cores: set[int]) -> Iterator[None]:
    """Bind the calling thread to ``cores`` for the block, then give it its cores back."""
    original = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, original)
