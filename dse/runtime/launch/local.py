"""A compiled deployment run or timed in this process, without MPI: its sub-models written to a
scratch directory, then its plan run (:mod:`dse.runtime.rank.inprocess`) or each sub-model
timed alone (:mod:`dse.runtime.rank.timing`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dse.files import scratch
from dse.runtime.compile.partition import Deployment
from dse.runtime.rank.inprocess import run_plan
from dse.runtime.rank.timing import beside, time_files


def run_deployment(
    deployment: Deployment, inputs: Mapping[str, np.ndarray], threads: int = 1
) -> dict[str, np.ndarray]:
    """The graph outputs of one inference through ``deployment``, run in this process."""
    with scratch("deploy-") as tmp:
        deployment.write_segments(Path(tmp))
        return run_plan(deployment.plan, Path(tmp), inputs, threads)


def time_segments(
    deployment: Deployment,
    runs: int,
    warmup: int = 1,
    threads: int = 1,
    each_round: Callable[[], None] | None = None,
) -> dict[str, tuple[int, float]]:
    """Each sub-model of ``deployment`` run alone on :func:`random_feeds`: ``warmup`` rounds,
    then ``runs`` timed rounds, every sub-model once per round (so a slow spell of the machine
    hits them all alike); ``each_round`` is called at the start of each timed round (to time
    something else alternately). Per sub-model: its device's index in the platform and median
    seconds."""
    device_of = {n: r.device_index for r in deployment.plan.ranks for n in r.segments}
    with scratch("segments-") as tmp:
        deployment.write_segments(Path(tmp))
        timed = time_files(Path(tmp), list(deployment.segments), runs, warmup, threads, each_round)
    return {name: (device_of[name], t) for name, t in timed.items()}


def time_segments_beside(
    deployment: Deployment, whole: Any, runs: int, warmup: int = 1, threads: int = 1
) -> tuple[dict[str, tuple[int, float]], float]:
    """:func:`time_segments`, each timed round also running ``whole`` (an onnxruntime session,
    the whole network) once on :func:`random_feeds`, so a slow spell of the machine hits both:
    per sub-model its device and median seconds, and the whole network's median seconds."""
    run_whole, whole_s = beside(whole)
    timed = time_segments(deployment, runs, warmup, threads, each_round=run_whole)
    return timed, float(np.median(whole_s))
