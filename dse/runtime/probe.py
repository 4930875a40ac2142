"""The machine's speed at a moment: the whole network, alone, timed on each core its ranks use.

A shared machine's speed drifts. On the 2-core VM this was built on, the whole DenseNet-121
took 71-85 ms (p10-p90) over two minutes, on a core nothing else of ours ran on, with CPU time
equal to wall time: the core itself ran slower, so no scheduling trick removes it. A latency
measured now and one measured at calibration compare only at the same speed. A probe times the
same work (the deployment's whole model in onnxruntime, one session per device's thread count)
between runs; :func:`dse.runtime.measure.measure_interleaved` calls it before the first run and
after every run, so each run has a probe on either side, and
:func:`dse.runtime.measure.take_out_drift` scales each run by the speed they show. The probe
runs in the launching process while no rank runs: it measures the machine, never competes with
a measurement.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np

from dse.platform import Platform

#: A probe times this much work per core (at least one run of the model).
PROBE_S = 0.12
LOCAL_HOSTS = {"localhost", "127.0.0.1", socket.gethostname()}


def probe_cores(platform: Platform) -> list[set[int]]:
    """The core sets of the platform's cpu devices on this machine (their ranks' bindings),
    once each; ``[]`` when none is here (the probe then runs where the OS puts it)."""
    from dse.runtime.package import core_slots

    allowed = os.sched_getaffinity(0)
    cores: list[set[int]] = []
    for dev, slot in zip(platform.devices, core_slots(platform), strict=True):
        if dev.kind != "cpu" or dev.host not in LOCAL_HOSTS:
            continue
        lo, _, hi = slot.partition("-")
        s = set(range(int(lo), int(hi or lo) + 1)) & allowed
        if s and s not in cores:
            cores.append(s)
    return cores


class SpeedProbe:
    """``probe()`` -> the median time (ms) of the whole model over a few runs on each core set.

    Built from one deployment directory (its ``plan.json`` names the whole model and the
    input); every deployment of the same network shares the probe."""

    def __init__(self, directory: Path, platform: Platform) -> None:
        from dse.runtime.package import read_plan
        from dse.runtime.partition import input_arrays
        from dse.runtime.worker import whole_model_session

        plan = read_plan(Path(directory))
        cpus = [d for d in platform.devices if d.kind == "cpu"]
        self.threads = cpus[0].threads if cpus else 1
        self.cores = probe_cores(platform)
        self.session = whole_model_session(plan, Path(plan["reference"]["path"]), self.threads)
        self.feeds = input_arrays(plan, int(plan.get("seed", 0)))
        self.session.run(None, self.feeds)  # the first run pays for allocation
        t0 = time.perf_counter()
        self.session.run(None, self.feeds)
        self.repeats = int(np.clip(round(PROBE_S / (time.perf_counter() - t0)), 1, 8))

    def __call__(self) -> float:
        times = []
        original = os.sched_getaffinity(0)
        try:
            for cores in self.cores or [original]:
                os.sched_setaffinity(0, cores)
                for _ in range(self.repeats):
                    t0 = time.perf_counter()
                    self.session.run(None, self.feeds)
                    times.append(time.perf_counter() - t0)
        finally:
            os.sched_setaffinity(0, original)
        return float(np.median(times) * 1e3)
