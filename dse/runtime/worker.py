"""One MPI rank: load its sub-models, run its steps for warm-up and measured iterations.

Tensors travel with mpi4py's buffer API (``Isend`` right after the producing segment,
``Probe`` + ``Recv`` into buffers allocated once), never pickled. A ``gather`` step receives a
split layer's parts straight into their channel ranges of the whole's buffer (one copy of its
own part, none of the others' when the range is contiguous, as with batch 1). Per iteration
each rank times its compute (inside onnxruntime), its wait (blocked in ``Probe`` until a
message is there) and its communication (receiving, gathering, posting and completing sends).
The latency of an iteration is the longest rank's time from a common barrier to its last step.
Rank 0 gathers everything, checks the outputs against the whole model and writes
``measurements.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.runtime.energy import energy_meter
from dse.runtime.partition import input_arrays
from dse.runtime.sessions import session

#: Outputs must agree to max|a - b| <= RTOL * max|b| (see tests/test_runtime_partition.py).
RTOL = 1e-4


def _spin_s() -> float | None:
    """How long a rank waiting for a message polls before it sleeps between polls, from
    ``DSE_WAIT_SPIN_US`` (microseconds; ``spin``: it spins in ``Probe`` as long as it waits)."""
    raw = os.environ.get("DSE_WAIT_SPIN_US", "spin").strip()
    if raw == "spin":
        return None
    try:
        return max(float(raw), 0.0) * 1e-6
    except ValueError:
        raise DseError(f"DSE_WAIT_SPIN_US={raw!r} must be microseconds or 'spin'") from None


SPIN_S = _spin_s()
SLEEP_S = 20e-6  # between polls once past SPIN_S


def probe(comm: Any, source: int, tag: int) -> None:
    """Return once a message from ``source`` with ``tag`` is there."""
    if SPIN_S is None:
        comm.Probe(source=source, tag=tag)
        return
    if comm.Iprobe(source=source, tag=tag):
        return
    clock = time.perf_counter
    end = clock() + SPIN_S
    while clock() < end:
        if comm.Iprobe(source=source, tag=tag):
            return
    while not comm.Iprobe(source=source, tag=tag):
        time.sleep(SLEEP_S)


def peak_rss_mb() -> float | None:
    """VmHWM of this process (MB), or None where /proc is not readable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class Rank:
    """The state of one rank: sessions, receive buffers, its steps."""

    def __init__(self, comm: Any, plan: dict[str, Any], directory: Path) -> None:
        self.comm, self.plan = comm, plan
        self.rank = comm.Get_rank()
        self.spec = plan["ranks"][self.rank]
        kind, threads = self.spec["kind"], int(self.spec["threads"])
        self.sessions = {
            name: session(directory / name, kind, threads) for name in self.spec["segments"]
        }
        tensors = plan["tensors"]
        self.buffers = {
            s["tensor"]: np.empty(tensors[s["tensor"]]["shape"], tensors[s["tensor"]]["dtype"])
            for s in self.spec["steps"]
            if s["op"] == "recv"
        }
        self.staging: dict[tuple[str, int], np.ndarray] = {}
        for s in self.spec["steps"]:
            if s["op"] != "gather":
                continue
            whole = self.buffers[s["tensor"]] = np.empty(s["shape"], s["dtype"])
            for part in s["parts"]:
                view = _part_view(whole, s["axis"], part["range"])
                if "tag" in part and not view.flags.c_contiguous:
                    self.staging[(s["tensor"], part["tag"])] = np.empty(view.shape, view.dtype)
        # gathered tensors this rank sends on: a fresh buffer per frame when frames overlap
        self.forwarded = {s["tensor"] for s in self.spec["steps"] if s["op"] == "send"}
        self.inputs = (
            input_arrays(plan, int(plan.get("seed", 0))) if self.rank == plan["entry_rank"] else {}
        )
        self.local: dict[str, np.ndarray] = {}
        self.held: list[list[np.ndarray]] = []

    def stream(self, frames: int, window: int = 4) -> float:
        """Push ``frames`` inferences through back to back, at most ``window`` frames of sends
        in flight; this rank's steady-state period (s per frame, after the first ``window``)."""
        from mpi4py import MPI

        in_flight: list[list[Any]] = []
        ends = []
        for _ in range(frames):
            reqs: list[Any] = []
            self.run_once(reqs)
            in_flight.append(reqs)
            if len(in_flight) > window:
                MPI.Request.Waitall(in_flight.pop(0))
                self.held.pop(0)
            ends.append(time.perf_counter())
        for reqs in in_flight:
            MPI.Request.Waitall(reqs)
        self.held.clear()
        skip = min(window, frames // 4)
        return (ends[-1] - ends[skip]) / max(frames - 1 - skip, 1)

    def run_once(self, pending: list[Any] | None = None) -> dict[str, float]:
        """One inference: this rank's steps in order; its timers (s) and bytes sent. Its sends
        are completed before it returns, unless a ``pending`` list takes their requests."""
        from mpi4py import MPI

        keep = pending is not None
        pending = pending if pending is not None else []
        comm, local = self.comm, self.local
        local.clear()
        local.update(self.inputs)
        held: list[np.ndarray] = []
        compute = wait = communication = 0.0
        sent = 0
        clock = time.perf_counter
        for s in self.spec["steps"]:
            op = s["op"]
            if op == "run":
                t0 = clock()
                outs = self.sessions[s["segment"]].run(
                    s["outputs"], {t: local[t] for t in s["inputs"]}
                )
                compute += clock() - t0
                local.update(zip(s["outputs"], outs, strict=True))
                if pending:
                    MPI.Request.Testall(pending)  # lets rendezvous sends progress
            elif op == "send":
                t0 = clock()
                arr = np.ascontiguousarray(local[s["tensor"]])
                pending.append(comm.Isend(arr, dest=s["to"], tag=s["tag"]))
                held.append(arr)
                sent += arr.nbytes
                communication += clock() - t0
            elif op == "gather":
                t0, waited = clock(), 0.0
                whole = self.buffers[s["tensor"]]
                if keep and s["tensor"] in self.forwarded:
                    whole = np.empty_like(whole)  # an earlier frame may still be sending it
                for part in sorted(s["parts"], key=lambda p: "tag" in p):  # own part first
                    view = _part_view(whole, s["axis"], part["range"])
                    if "tag" not in part:
                        view[...] = local[part["tensor"]]
                        continue
                    t1 = clock()
                    probe(comm, part["from"], part["tag"])
                    waited += clock() - t1
                    stage = self.staging.get((s["tensor"], part["tag"]))
                    into = view if stage is None else stage
                    comm.Recv(into, source=part["from"], tag=part["tag"])
                    if stage is not None:
                        view[...] = stage
                wait += waited
                communication += clock() - t0 - waited
                local[s["tensor"]] = whole
            else:
                t0 = clock()
                probe(comm, s["from"], s["tag"])
                t1 = clock()
                buf = self.buffers[s["tensor"]]
                comm.Recv(buf, source=s["from"], tag=s["tag"])
                wait += t1 - t0
                communication += clock() - t1
                local[s["tensor"]] = buf
            for t in s.get("free", ()):
                local.pop(t, None)
        if keep:  # requests keep their buffers alive in mpi4py; these arrays are fresh
            self.held.append(held)
        else:
            t0 = clock()
            MPI.Request.Waitall(pending)
            communication += clock() - t0
        return {"compute": compute, "wait": wait, "communication": communication, "sent": sent}


def _part_view(whole: np.ndarray, axis: int, bounds: list[int]) -> np.ndarray:
    """The channel range ``bounds`` of ``whole`` along ``axis`` (a view)."""
    index = [slice(None)] * whole.ndim
    index[axis] = slice(*bounds)
    return whole[tuple(index)]


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values) * 1e3
    return {
        "median": round(float(np.median(a)), 4),
        "p10": round(float(np.percentile(a, 10)), 4),
        "p90": round(float(np.percentile(a, 90)), 4),
    }


def measure(
    directory: Path,
    warmup: int | None = None,
    iterations: int | None = None,
    kill: int = -1,
    stream: int | None = None,
) -> dict[str, Any] | None:
    """Run the deployment in ``directory`` on MPI.COMM_WORLD; rank 0 returns the measurements
    (and writes them), other ranks None. ``kill`` is a test hook: that rank kills itself
    (SIGKILL) after its first measured iteration."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    plan = json.loads((directory / "plan.json").read_text())
    run_cfg = plan.get("run", {})
    warmup = int(run_cfg.get("warmup", 4) if warmup is None else warmup)
    iterations = int(run_cfg.get("iterations", 20) if iterations is None else iterations)
    stream = int(run_cfg.get("stream", 0) if stream is None else stream)
    if comm.Get_size() != len(plan["ranks"]):
        raise DseError(
            f"the deployment has {len(plan['ranks'])} ranks but mpiexec started "
            f"{comm.Get_size()}: run it with mpiexec -n {len(plan['ranks'])}"
        )
    resettable = reset_peak_rss()
    t0 = time.perf_counter()
    me = Rank(comm, plan, directory)
    load_s = time.perf_counter() - t0
    peak_load = peak_rss_mb()
    reset_peak_rss()
    meter = energy_meter()
    latencies: list[float] = []
    timers: list[dict[str, float]] = []
    energy_start = None
    for it in range(warmup + iterations):
        if it == warmup:
            energy_start = meter.read() if meter.available else None
        comm.Barrier()
        start = time.perf_counter()
        t = me.run_once()
        mine = time.perf_counter() - start
        longest = comm.allreduce(mine, op=MPI.MAX)
        if it >= warmup:
            latencies.append(longest)
            timers.append(t)
        if it == warmup and me.rank == kill:
            os.kill(os.getpid(), 9)
    energy = meter.per_iteration(energy_start, iterations) if meter.available else None
    period = None
    if stream > 1:  # frames back to back, several in flight: the pipelined period
        comm.Barrier()
        period = comm.allreduce(me.stream(stream), op=MPI.MAX)
    peak_run = peak_rss_mb()
    mine = {
        "rank": me.rank,
        "device": me.spec["device"],
        "host": me.spec["host"],
        "kind": me.spec["kind"],
        "threads": me.spec["threads"],
        "segments": len(me.spec["segments"]),
        "load_s": round(load_s, 4),
        "compute_ms": _stats([t["compute"] for t in timers]),
        "communication_ms": _stats([t["communication"] for t in timers]),
        "wait_ms": _stats([t["wait"] for t in timers]),
        "bytes_sent": int(timers[-1]["sent"]) if timers else 0,
        "peak_rss_loading_mb": None if peak_load is None else round(peak_load, 1),
        "peak_rss_running_mb": None if peak_run is None else round(peak_run, 1),
        "peak_rss_separate": resettable,
        "energy_j": energy,
        "energy_reason": None if meter.available else meter.reason,
        # a counter covers the whole host (RAPL package) or board (INA3221), not this rank
        "energy_scope": meter.kind,
    }
    ranks = comm.gather(mine, root=0)  # small dicts of figures; tensors never go pickled
    outputs = _gather_outputs(comm, plan, me)
    if me.rank != 0:
        return None
    result = {
        "status": "ok",
        "net": plan["net"],
        "fingerprint": plan["fingerprint"],
        "mapping_hash": plan["mapping_hash"],
        "ranks_count": len(ranks),
        "warmup": warmup,
        "iterations": iterations,
        "latency_ms": {**_stats(latencies), "all": [round(x * 1e3, 4) for x in latencies]},
        "ranks": ranks,
        "energy": {
            r["device"]: {"joules": r["energy_j"], "reason": r["energy_reason"]} for r in ranks
        },
        "equivalence": equivalence(plan, outputs),
    }
    if period is not None:
        result["stream"] = {"frames": stream, "period_ms": round(period * 1e3, 4)}
    if result["equivalence"].get("passed") is False:
        result["status"] = "failed"
        result["reason"] = (
            f"outputs differ from the whole model: max rel error "
            f"{result['equivalence']['max_rel_error']:.3g} > {RTOL:g}"
        )
    from dse.files import write_text

    write_text(directory / "measurements.json", json.dumps(result, indent=1))
    return result


def _gather_outputs(comm: Any, plan: dict[str, Any], me: Rank) -> dict[str, np.ndarray]:
    """The last iteration's graph outputs, sent to rank 0 with the buffer API."""
    got: dict[str, np.ndarray] = {}
    for k, o in enumerate(plan["outputs"]):
        owner, name = int(o["rank"]), o["name"]
        if owner == 0 and me.rank == 0:
            got[name] = np.array(me.local[name])
        elif me.rank == owner:
            comm.Send(np.ascontiguousarray(me.local[name]), dest=0, tag=1_000_000 + k)
        elif me.rank == 0:
            buf = np.empty(o["shape"], o["dtype"])
            comm.Recv(buf, source=owner, tag=1_000_000 + k)
            got[name] = buf
    return got


def whole_model_session(plan: dict[str, Any], path: Path, threads: int = 1):
    """The whole model of a deployment (``plan["reference"]``) in one cpu session."""
    import onnx

    from dse.net.onnx_load import fix_input_shapes

    if plan["reference"].get("input_shape") is None:
        model: Any = path  # onnxruntime reads the file itself: no protobuf copy
    else:
        model = onnx.load(path, load_external_data=True)
        fix_input_shapes(model, plan["reference"].get("input_shape"))
    return session(model, "cpu", threads)


def reference_outputs(plan: dict[str, Any], path: Path, names: list[str]) -> list[np.ndarray]:
    """The whole model's outputs on the plan's input, computed once per (model file, input)
    and cached (``<zoo cache>/reference/<key>.npz``): building the whole-model session took
    8 s of a 23 s VGG-16 run, and fidelity and calibration run each deployment several times."""
    import hashlib

    from dse.net.zoo.materialize import cache_root

    st = path.stat()
    spec = [str(path.resolve()), st.st_size, st.st_mtime_ns, plan.get("seed", 0)]
    spec += [plan["inputs"], plan["reference"].get("input_shape"), names]
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    cache = cache_root() / "reference" / f"{key[:32]}.npz"
    try:
        with np.load(cache, allow_pickle=False) as z:
            return [z[f"o{i}"] for i in range(len(names))]
    except (OSError, KeyError, ValueError):
        pass
    expected = whole_model_session(plan, path).run(
        names, input_arrays(plan, int(plan.get("seed", 0)))
    )
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **{f"o{i}": np.asarray(e) for i, e in enumerate(expected)})
        os.replace(tmp, cache)
    except OSError:
        pass  # no cache: computed again next time
    return expected


def equivalence(plan: dict[str, Any], outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The partitioned outputs against the whole model in onnxruntime on the same input."""
    ref = plan.get("reference") or {}
    path = ref.get("path")
    if not path or not Path(path).is_file():
        return {"passed": None, "reason": f"the whole model is not readable here ({path})"}
    names = [o["name"] for o in plan["outputs"]]
    expected = reference_outputs(plan, Path(path), names)
    abs_err = rel_err = 0.0
    for name, r in zip(names, expected, strict=True):
        diff = float(np.abs(outputs[name].astype(np.float64) - r).max()) if r.size else 0.0
        scale = float(np.abs(r).max()) if r.size else 0.0
        abs_err = max(abs_err, diff)
        rel_err = max(rel_err, diff / scale if scale > 0 else diff)
    return {
        "passed": rel_err <= RTOL,
        "max_abs_error": abs_err,
        "max_rel_error": rel_err,
        "tolerance_rel": RTOL,
        "definition": "max|partitioned - whole| / max|whole| over each output",
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m mpi4py -m dse.runtime DIR [--warmup N] [--iterations N]``"""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mpi4py -m dse.runtime")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--stream", type=int, default=None, help="frames pushed back to back")
    parser.add_argument("--kill-rank", type=int, default=-1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if not (args.directory / "plan.json").is_file():
            raise DseError(f"{args.directory} is not a deployment (no plan.json): run dse.deploy")
        measure(args.directory, args.warmup, args.iterations, args.kill_rank, args.stream)
    except DseError as exc:
        from mpi4py import MPI

        print(f"error: rank {MPI.COMM_WORLD.Get_rank()}: {exc}", file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(2)
    return 0
