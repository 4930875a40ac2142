"""Run a deployment's plan in one process (no MPI): every rank's steps, in a valid order."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.runtime.partition import Deployment
from dse.runtime.sessions import session


def run_deployment(
    deployment: Deployment, inputs: Mapping[str, np.ndarray], threads: int = 1
) -> dict[str, np.ndarray]:
    """:func:`run_sequential` on a deployment written to a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="dse-deploy-") as tmp:
        deployment.write_segments(Path(tmp))
        return run_sequential(deployment.plan, Path(tmp), inputs, threads)


def run_sequential(
    plan: dict[str, Any],
    directory: Path,
    inputs: Mapping[str, np.ndarray],
    threads: int = 1,
) -> dict[str, np.ndarray]:
    """The graph outputs of one inference through the plan: ranks take turns, each running its
    steps until it waits for a tensor no one has sent yet (a deadlock is an error)."""
    sessions = {
        name: session(Path(directory) / name, "cpu", threads)
        for r in plan["ranks"]
        for name in r["segments"]
    }
    ranks = plan["ranks"]
    local: list[dict[str, np.ndarray]] = [{} for _ in ranks]
    entry = plan["entry_rank"]
    local[entry].update({k: np.asarray(v) for k, v in inputs.items()})
    wire: dict[tuple[int, int, int], np.ndarray] = {}
    pc = [0] * len(ranks)
    while any(pc[r] < len(ranks[r]["steps"]) for r in range(len(ranks))):
        progressed = False
        for r, spec in enumerate(ranks):
            steps = spec["steps"]
            while pc[r] < len(steps):
                s = steps[pc[r]]
                if not _step(s, r, local[r], wire, sessions, plan["tensors"]):
                    break
                pc[r] += 1
                progressed = True
        if not progressed:
            waiting = {
                r: ranks[r]["steps"][pc[r]]
                for r in range(len(ranks))
                if pc[r] < len(ranks[r]["steps"])
            }
            raise DseError(f"the plan deadlocks: ranks waiting at {waiting}")
    return {o["name"]: local[o["rank"]][o["name"]] for o in plan["outputs"]}


def _step(
    s: dict[str, Any],
    rank: int,
    local: dict[str, np.ndarray],
    wire: dict[tuple[int, int, int], np.ndarray],
    sessions: dict[str, Any],
    tensors: dict[str, Any],
) -> bool:
    """Do one step; False when it is a receive whose tensor has not been sent yet."""
    op = s["op"]
    if op == "recv":
        key = (s["from"], rank, s["tag"])
        if key not in wire:
            return False
        value = wire.pop(key)
        spec = tensors[s["tensor"]]
        if list(value.shape) != spec["shape"] or value.dtype != np.dtype(spec["dtype"]):
            raise DseError(f"tensor '{s['tensor']}' arrived with the wrong shape or type")
        local[s["tensor"]] = value
    elif op == "send":
        wire[(rank, s["to"], s["tag"])] = np.ascontiguousarray(local[s["tensor"]]).copy()
    elif op == "gather":
        remote = [(part["from"], rank, part["tag"]) for part in s["parts"] if "tag" in part]
        if any(key not in wire for key in remote):
            return False
        whole = np.empty(s["shape"], np.dtype(s["dtype"]))
        for part in s["parts"]:
            value = wire.pop((part["from"], rank, part["tag"])) if "tag" in part else None
            value = local[part["tensor"]] if value is None else value
            index = [slice(None)] * whole.ndim
            index[s["axis"]] = slice(*part["range"])
            if value.shape != whole[tuple(index)].shape:
                raise DseError(f"part '{part['tensor']}' arrived with the wrong shape")
            whole[tuple(index)] = value
        local[s["tensor"]] = whole
    else:
        sess = sessions[s["segment"]]
        outs = sess.run(s["outputs"], {t: local[t] for t in s["inputs"]})
        local.update(zip(s["outputs"], outs, strict=True))
    for t in s.get("free", []):
        local.pop(t, None)
    return True
