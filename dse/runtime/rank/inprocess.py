"""A deployment's plan run in one process, without MPI: every rank's steps carried out in a
valid order, tensors crossing ranks on a wire of this process."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from dse.errors import DseError
from dse.runtime.deployment.plan import Plan, step_json
from dse.runtime.rank.sessions import session
from dse.runtime.rank.steps import carry_out, messages, rank_state


class WireChannel:
    """Tensors between ranks of one process: a send copies its array onto the wire, a receive
    takes it off into the buffer given (its shape and type checked)."""

    def __init__(self, rank: int, wire: dict[tuple[int, int, int], np.ndarray]) -> None:
        self.rank, self.wire = rank, wire

    def send(self, array: np.ndarray, to: int, tag: int) -> None:
        self.wire[(self.rank, to, tag)] = array.copy()

    def wait(self, source: int, tag: int) -> None:
        if (source, self.rank, tag) not in self.wire:
            raise DseError(f"rank {self.rank} waits for a message no rank has sent")

    def recv(self, into: np.ndarray, source: int, tag: int) -> None:
        value = self.wire.pop((source, self.rank, tag))
        if value.shape != into.shape or value.dtype != into.dtype:
            raise DseError(
                f"a tensor from rank {source} (tag {tag}) arrived as {value.dtype}"
                f"{list(value.shape)}, not {into.dtype}{list(into.shape)}"
            )
        into[...] = value

    def progress(self) -> None:
        pass


def run_plan(
    plan: Plan,
    directory: Path,
    inputs: Mapping[str, np.ndarray],
    threads: int = 1,
) -> dict[str, np.ndarray]:
    """The graph outputs of one inference through the plan, every rank's steps carried out in
    this process (:mod:`dse.runtime.rank.steps`): ranks take turns, each running its steps
    until it waits for a message no one has sent yet (a deadlock is an error)."""
    wire: dict[tuple[int, int, int], np.ndarray] = {}
    states = []
    for spec in plan.ranks:
        files = spec.segments
        sessions = {name: session(Path(directory) / name, "cpu", threads) for name in files}
        states.append(rank_state(plan, spec, sessions, WireChannel(spec.rank, wire)))
    states[plan.entry_rank].local.update({k: np.asarray(v) for k, v in inputs.items()})
    pc = [0] * len(states)
    while any(pc[r] < len(st.spec.steps) for r, st in enumerate(states)):
        progressed = False
        for r, state in enumerate(states):
            steps = state.spec.steps
            while pc[r] < len(steps):
                if any((src, r, tag) not in wire for src, tag in messages(steps[pc[r]])):
                    break
                carry_out(steps[pc[r]], state)
                pc[r] += 1
                progressed = True
        if not progressed:
            waiting = {
                r: step_json(st.spec.steps[pc[r]])
                for r, st in enumerate(states)
                if pc[r] < len(st.spec.steps)
            }
            raise DseError(f"the plan deadlocks: ranks waiting at {waiting}")
    return {o.name: states[o.rank].local[o.name] for o in plan.outputs}
