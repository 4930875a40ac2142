"""A rank's steps carried out, one operation per kind of step (:data:`OPERATIONS`): run a
sub-model, send, receive, gather.

The MPI rank (:mod:`dse.runtime.rank.worker`) and the in-process runner
(:mod:`dse.runtime.rank.inprocess`) carry out every step here; they differ only in their
:class:`Channel`, how a tensor crosses ranks. A step's operation times what it does into the
rank's :class:`Timers`: onnxruntime's work as compute, a wait for a message to arrive as wait,
receiving, gathering and posting sends as communication.

Buffers: a received tensor lands in a buffer allocated once per tensor (:func:`buffers`); a
gather receives each part straight into its range of the whole's buffer (channels, or rows
along axis 2), through a staging buffer where that range is not contiguous. With ``fresh``
gathers (frames in flight) a gathered tensor the rank sends on gets a new buffer per frame,
since an earlier frame may still be sending it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from dse.runtime.deployment.plan import Gather, Plan, RankPlan, Recv, Run, Send

Step = Run | Send | Recv | Gather


class Session(Protocol):
    """A sub-model ready to run (an onnxruntime session)."""

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The named outputs on ``feeds``."""


class Channel(Protocol):
    """How tensors cross ranks."""

    def send(self, array: np.ndarray, to: int, tag: int) -> None:
        """Post ``array`` (contiguous, not written again until sent) to rank ``to``."""

    def wait(self, source: int, tag: int) -> None:
        """Return once the message ``(source, tag)`` can be received."""

    def recv(self, into: np.ndarray, source: int, tag: int) -> None:
        """Receive the message ``(source, tag)`` into ``into``."""

    def progress(self) -> None:
        """Let posted sends move (after a sub-model ran)."""


@dataclass
class Timers:
    """One inference's seconds by kind, and the bytes the rank sent; ``cpu`` (the process's CPU
    time) and ``runnable`` (its main thread ready but not running) where the rank reads them."""

    compute: float = 0.0
    wait: float = 0.0
    communication: float = 0.0
    sent: int = 0
    cpu: float = 0.0
    runnable: float = 0.0


@dataclass
class RankState:
    """What a rank's steps work on: its sessions, buffers and local tensors."""

    plan: Plan
    spec: RankPlan
    sessions: dict[str, Session]  # by sub-model file
    channel: Channel
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    staging: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    forwarded: set[str] = field(default_factory=set)  # gathered tensors it sends on
    local: dict[str, np.ndarray] = field(default_factory=dict)
    timers: Timers = field(default_factory=Timers)
    fresh: bool = False  # a new buffer per frame for gathered tensors it sends on


def rank_state(
    plan: Plan, spec: RankPlan, sessions: dict[str, Session], channel: Channel
) -> RankState:
    """A rank's state with its receive and gather buffers allocated (:func:`buffers`)."""
    state = RankState(plan, spec, sessions, channel)
    state.buffers, state.staging = buffers(plan, spec)
    state.forwarded = {s.tensor for s in spec.steps if isinstance(s, Send)}
    return state


def buffers(
    plan: Plan, spec: RankPlan
) -> tuple[dict[str, np.ndarray], dict[tuple[str, int], np.ndarray]]:
    """A buffer per tensor the rank receives or gathers, and a staging buffer per remote part
    whose range of its gathered tensor is not contiguous."""
    whole: dict[str, np.ndarray] = {}
    staging: dict[tuple[str, int], np.ndarray] = {}
    for s in spec.steps:
        if isinstance(s, Recv):
            wire = plan.tensors[s.tensor]
            whole[s.tensor] = np.empty(wire.shape, wire.dtype)
        elif isinstance(s, Gather):
            whole[s.tensor] = np.empty(s.shape, s.dtype)
            for part in s.parts:
                view = part_view(whole[s.tensor], s.axis, part.range)
                if part.tag is not None and not view.flags.c_contiguous:
                    staging[(s.tensor, part.tag)] = np.empty(view.shape, view.dtype)
    return whole, staging


def part_view(whole: np.ndarray, axis: int, bounds: tuple[int, int]) -> np.ndarray:
    """The range ``bounds`` (channels, or rows) of ``whole`` along ``axis`` (a view)."""
    index: list[slice] = [slice(None)] * whole.ndim
    index[axis] = slice(*bounds)
    return whole[tuple(index)]


def messages(step: Step) -> list[tuple[int, int]]:
    """The messages ``(source, tag)`` a step receives."""
    if isinstance(step, Recv):
        return [(step.source, step.tag)]
    if isinstance(step, Gather):
        return [(p.source, p.tag) for p in step.parts if p.tag is not None]
    return []


def carry_out(step: Step, state: RankState) -> None:
    """Do one step on ``state``, then drop the local tensors it used last."""
    OPERATIONS[step.op](step, state)
    for t in step.free:
        state.local.pop(t, None)


def _run(s: Run, state: RankState) -> None:
    local, clock = state.local, time.perf_counter
    t0 = clock()
    outs = state.sessions[s.segment].run(s.outputs, {t: local[t] for t in s.inputs})
    state.timers.compute += clock() - t0
    local.update(zip(s.outputs, outs, strict=True))
    state.channel.progress()


def _send(s: Send, state: RankState) -> None:
    t0 = time.perf_counter()
    arr = np.ascontiguousarray(state.local[s.tensor])
    state.channel.send(arr, s.to, s.tag)
    state.timers.sent += arr.nbytes
    state.timers.communication += time.perf_counter() - t0


def _recv(s: Recv, state: RankState) -> None:
    clock = time.perf_counter
    t0 = clock()
    state.channel.wait(s.source, s.tag)
    t1 = clock()
    buf = state.buffers[s.tensor]
    state.channel.recv(buf, s.source, s.tag)
    state.timers.wait += t1 - t0
    state.timers.communication += clock() - t1
    state.local[s.tensor] = buf


def _gather(s: Gather, state: RankState) -> None:
    clock = time.perf_counter
    t0, waited = clock(), 0.0
    whole = state.buffers[s.tensor]
    if state.fresh and s.tensor in state.forwarded:
        whole = np.empty_like(whole)  # an earlier frame may still be sending it
    for part in sorted(s.parts, key=lambda p: p.tag is not None):  # its own part first
        view = part_view(whole, s.axis, part.range)
        if part.tag is None:
            view[...] = state.local[part.tensor]
            continue
        t1 = clock()
        state.channel.wait(part.source, part.tag)
        waited += clock() - t1
        stage = state.staging.get((s.tensor, part.tag))
        state.channel.recv(view if stage is None else stage, part.source, part.tag)
        if stage is not None:
            view[...] = stage
    state.timers.wait += waited
    state.timers.communication += clock() - t0 - waited
    state.local[s.tensor] = whole


#: The operation of each kind of step (a step's ``op``).
OPERATIONS: dict[str, Callable[[Any, RankState], None]] = {
    Run.op: _run,
    Send.op: _send,
    Recv.op: _recv,
    Gather.op: _gather,
}
