"""Run a deployment's plan in one process (no MPI): every rank's steps, in a valid order; or
time each of its sub-models alone (:func:`time_segments`, :func:`time_segments_beside`: for
calibration)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.files import scratch
from dse.runtime.partition import Deployment
from dse.runtime.plan import Gather, Plan, Recv, Send, Step, WireTensor, step_json
from dse.runtime.sessions import session


def run_deployment(
    deployment: Deployment, inputs: Mapping[str, np.ndarray], threads: int = 1
) -> dict[str, np.ndarray]:
    """:func:`run_sequential` on a deployment written to a temporary directory."""
    with scratch("deploy-") as tmp:
        deployment.write_segments(Path(tmp))
        return run_sequential(deployment.plan, Path(tmp), inputs, threads)


def run_sequential(
    plan: Plan,
    directory: Path,
    inputs: Mapping[str, np.ndarray],
    threads: int = 1,
) -> dict[str, np.ndarray]:
    """The graph outputs of one inference through the plan: ranks take turns, each running its
    steps until it waits for a tensor no one has sent yet (a deadlock is an error)."""
    sessions = {
        name: session(Path(directory) / name, "cpu", threads)
        for r in plan.ranks
        for name in r.segments
    }
    ranks = plan.ranks
    local: list[dict[str, np.ndarray]] = [{} for _ in ranks]
    local[plan.entry_rank].update({k: np.asarray(v) for k, v in inputs.items()})
    wire: dict[tuple[int, int, int], np.ndarray] = {}
    pc = [0] * len(ranks)
    while any(pc[r] < len(ranks[r].steps) for r in range(len(ranks))):
        progressed = False
        for r, spec in enumerate(ranks):
            while pc[r] < len(spec.steps):
                if not _step(spec.steps[pc[r]], r, local[r], wire, sessions, plan.tensors):
                    break
                pc[r] += 1
                progressed = True
        if not progressed:
            waiting = {
                r: step_json(ranks[r].steps[pc[r]])
                for r in range(len(ranks))
                if pc[r] < len(ranks[r].steps)
            }
            raise DseError(f"the plan deadlocks: ranks waiting at {waiting}")
    return {o.name: local[o.rank][o.name] for o in plan.outputs}


def _step(
    s: Step,
    rank: int,
    local: dict[str, np.ndarray],
    wire: dict[tuple[int, int, int], np.ndarray],
    sessions: dict[str, Any],
    tensors: dict[str, WireTensor],
) -> bool:
    """Do one step; False when it is a receive whose tensor has not been sent yet."""
    if isinstance(s, Recv):
        key = (s.source, rank, s.tag)
        if key not in wire:
            return False
        value = wire.pop(key)
        spec = tensors[s.tensor]
        if value.shape != spec.shape or value.dtype != np.dtype(spec.dtype):
            raise DseError(f"tensor '{s.tensor}' arrived with the wrong shape or type")
        local[s.tensor] = value
    elif isinstance(s, Send):
        wire[(rank, s.to, s.tag)] = np.ascontiguousarray(local[s.tensor]).copy()
    elif isinstance(s, Gather):
        remote = [(part.source, rank, part.tag) for part in s.parts if part.tag is not None]
        if any(key not in wire for key in remote):
            return False
        whole = np.empty(s.shape, np.dtype(s.dtype))
        for part in s.parts:
            value = wire.pop((part.source, rank, part.tag)) if part.tag is not None else None
            value = local[part.tensor] if value is None else value
            index = [slice(None)] * whole.ndim
            index[s.axis] = slice(*part.range)
            if value.shape != whole[tuple(index)].shape:
                raise DseError(f"part '{part.tensor}' arrived with the wrong shape")
            whole[tuple(index)] = value
        local[s.tensor] = whole
    else:
        outs = sessions[s.segment].run(s.outputs, {t: local[t] for t in s.inputs})
        local.update(zip(s.outputs, outs, strict=True))
    for t in s.free:
        local.pop(t, None)
    return True


def random_feeds(sess: Any) -> dict[str, np.ndarray]:
    """Seeded random float32 inputs of an onnxruntime session's input shapes (a symbolic
    dimension taken as 1)."""
    rng = np.random.default_rng(0)
    return {
        i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.float32)
        for i in sess.get_inputs()
    }


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


def time_segments_beside(
    deployment: Deployment, whole: Any, runs: int, warmup: int = 1, threads: int = 1
) -> tuple[dict[str, tuple[int, float]], float]:
    """:func:`time_segments`, each timed round also running ``whole`` (an onnxruntime session,
    the whole network) once on :func:`random_feeds`, so a slow spell of the machine hits both:
    per sub-model its device and median seconds, and the whole network's median seconds."""
    run_whole, whole_s = beside(whole)
    timed = time_segments(deployment, runs, warmup, threads, each_round=run_whole)
    return timed, float(np.median(whole_s))
