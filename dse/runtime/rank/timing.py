"""Sub-models timed alone in this process: each on seeded random inputs, in rounds, so a slow
spell of the machine hits them all alike (calibration's micro-benchmarks)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dse.runtime.rank.sessions import session


def random_feeds(sess: Any) -> dict[str, np.ndarray]:
    """Seeded random float32 inputs of an onnxruntime session's input shapes (a symbolic
    dimension taken as 1)."""
    rng = np.random.default_rng(0)
    return {
        i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.float32)
        for i in sess.get_inputs()
    }


def time_files(
    directory: Path,
    names: list[str],
    runs: int,
    warmup: int = 1,
    threads: int = 1,
    each_round: Callable[[], None] | None = None,
) -> dict[str, float]:
    """:func:`time_segments` of the sub-model files ``names`` in ``directory``: median
    seconds of each."""
    sessions = {name: session(Path(directory) / name, "cpu", threads) for name in names}
    feeds = {name: random_feeds(s) for name, s in sessions.items()}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for r in range(warmup + runs):
        if r >= warmup and each_round is not None:
            each_round()
        for name, s in sessions.items():
            t0 = time.perf_counter()
            s.run(None, feeds[name])
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(v)) for name, v in times.items()}


def beside(whole: Any) -> tuple[Callable[[], None], list[float]]:
    """A call that runs ``whole`` (an onnxruntime session) once on :func:`random_feeds`, and
    the list its times (s) go to."""
    feeds = random_feeds(whole)
    whole_s: list[float] = []

    def run_whole() -> None:
        t0 = time.perf_counter()
        whole.run(None, feeds)
        whole_s.append(time.perf_counter() - t0)

    return run_whole, whole_s
