"""One MPI rank: load its sub-models, run its steps for warm-up and measured iterations.

Tensors travel with mpi4py's buffer API (``Isend`` right after the producing segment,
``Probe`` + ``Recv`` into buffers allocated once), never pickled. A ``gather`` step receives a
split layer's parts straight into their ranges (channels, or rows) of the whole's buffer (one
copy of its own part, none of the others' when the range is contiguous, as with channels at
batch 1; bands of rows of several channels pass a staging buffer). Per iteration
each rank times its compute (inside onnxruntime), its wait (blocked in ``Probe`` until a
message is there) and its communication (receiving, gathering, posting and completing sends).
The latency of an iteration is the longest rank's time from a common barrier to its last step.
Rank 0 gathers everything, checks the outputs against the whole model
(:mod:`dse.runtime.rank.equivalence`) and writes ``measurements.json``, the run's one writer.

Before anything is allocated every rank reads the plan through the checked reader
(:func:`dse.runtime.deployment.reader.read_plan`, its own sub-models' ONNX inputs and outputs, its
buffers bounded by this machine's memory too); when any rank finds it wrong, every rank stops with
status 2 and rank 0 prints the reason in one line. A run whose outputs differ from the whole
model's, or could not be checked, also ends with status 2 and one line, after its measurements are
written.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.runtime.deployment.layout import MEASUREMENTS
from dse.runtime.deployment.measurements import (
    Latency,
    Measurement,
    RankFigures,
    Stream,
    stats,
    write_measurements,
)
from dse.runtime.deployment.plan import Plan, RunSettings, input_arrays
from dse.runtime.deployment.reader import host_memory_bytes, read_plan
from dse.runtime.deployment.validate import OUTPUT_TAG
from dse.runtime.rank.energy import energy_meter
from dse.runtime.rank.equivalence import equivalence, verdict
from dse.runtime.rank.pace import RunQueue, pace_from_env
from dse.runtime.rank.sessions import session
from dse.runtime.rank.steps import Timers, carry_out, rank_state
from dse.runtime.rank.waits import Waits, spin_s

# mpi4py.MPI is imported where a rank needs it: importing it initialises MPI (about a second), and
# Rank's helpers and whole_model_session are used outside ranks too.


def _status_mb(field: str) -> float | None:
    """A figure of this process's /proc/self/status in kB (``VmHWM``, ``RssFile``), in MB,
    or None where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def peak_rss_mb() -> float | None:
    """VmHWM of this process (MB), or None where /proc is not readable."""
    return _status_mb("VmHWM")


def rss_file_mb() -> float | None:
    """The part of this process's RSS that maps files (RssFile: its libraries' pages), in MB,
    or None. How many of a library's pages a process maps depends on the page cache, not only
    on the process."""
    return _status_mb("RssFile")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class MpiChannel:
    """Tensors between ranks over MPI with the buffer API: a send is posted (``Isend``) and its
    request and array kept until completed; a receive waits in :class:`Waits` and lands in the
    buffer given."""

    def __init__(self, comm: Any, waits: Waits) -> None:
        from mpi4py import MPI

        self.comm, self.waits, self.testall = comm, waits, MPI.Request.Testall
        self.pending: list[Any] = []  # the requests of the frame's sends
        self.held: list[np.ndarray] = []  # their arrays (mpi4py keeps them alive too)

    def send(self, array: np.ndarray, to: int, tag: int) -> None:
        self.pending.append(self.comm.Isend(array, dest=to, tag=tag))
        self.held.append(array)

    def wait(self, source: int, tag: int) -> None:
        self.waits.probe(source, tag)

    def recv(self, into: np.ndarray, source: int, tag: int) -> None:
        self.waits.recv(into, source, tag)

    def progress(self) -> None:
        if self.pending:
            self.testall(self.pending)  # lets rendezvous sends progress


class Rank:
    """One rank: its sessions and buffers (:func:`dse.runtime.rank.steps.rank_state`), its
    steps carried out over MPI, one inference at a time or frames back to back."""

    def __init__(self, comm: Any, plan: Plan, directory: Path) -> None:
        self.comm, self.plan = comm, plan
        self.rank = comm.Get_rank()
        self.spec = plan.ranks[self.rank]
        kind, threads = self.spec.kind, self.spec.threads
        sessions = {name: session(directory / name, kind, threads) for name in self.spec.segments}
        pace = pace_from_env()
        self.waits = Waits(comm, spin_s(), pace)  # every wait of the rank (dse.runtime.rank.waits)
        self.channel = MpiChannel(comm, self.waits)
        self.state = rank_state(plan, self.spec, sessions, self.channel)
        self.inputs = input_arrays(plan) if self.rank == plan.entry_rank else {}
        self.held: list[list[np.ndarray]] = []  # arrays of the sends in flight, by frame
        self.sending: deque[list[Any]] = deque()  # the sends in flight, by frame
        self.run_queue = RunQueue()
        self.paced_s = (lambda: pace.spent_s) if pace is not None else (lambda: 0.0)

    @property
    def local(self) -> dict[str, np.ndarray]:
        """The tensors of the last inference this rank holds."""
        return self.state.local

    def stream(self, frames: int, window: int = 4) -> float:
        """Push ``frames`` inferences through back to back, at most ``window`` frames of sends
        in flight; this rank's steady-state period (s per frame, after the first ``window``)."""

        ends = []
        for _ in range(frames):
            reqs: list[Any] = []
            self.run_once(reqs)
            self.keep_sending(reqs, window)
            ends.append(time.perf_counter())
        self.drain()
        skip = min(window, frames // 4)
        return (ends[-1] - ends[skip]) / max(frames - 1 - skip, 1)

    def keep_sending(self, requests: list[Any], window: int) -> None:
        """Keep the sends ``requests`` of the frame just run in flight, at most ``window``
        frames' sends in all: the oldest are completed first."""
        self.sending.append(requests)
        if len(self.sending) > window:
            self.waits.complete(self.sending.popleft())
            self.held.pop(0)

    def drain(self) -> None:
        """Complete every send in flight (:meth:`keep_sending`)."""
        while self.sending:
            self.waits.complete(self.sending.popleft())
        self.held.clear()

    def run_once(self, pending: list[Any] | None = None) -> Timers:
        """One inference: this rank's steps in order; its timers (s) and bytes sent. Its sends
        are completed before it returns, unless a ``pending`` list takes their requests."""
        keep = pending is not None
        state, channel = self.state, self.channel
        channel.pending = pending if pending is not None else []
        channel.held = []
        state.fresh = keep
        state.local.clear()
        state.local.update(self.inputs)
        state.timers = timers = Timers()
        cpu0, queued0, paced0 = time.process_time(), self.run_queue(), self.paced_s()
        for s in self.spec.steps:
            carry_out(s, state)
        if keep:  # requests keep their buffers alive in mpi4py; these arrays are fresh
            self.held.append(channel.held)
        else:
            t0 = time.perf_counter()
            self.waits.complete(channel.pending)
            timers.communication += time.perf_counter() - t0
        # every thread of the rank, waiting included, pacing (dse.runtime.rank.pace) left out
        timers.cpu = time.process_time() - cpu0 - (self.paced_s() - paced0)
        timers.runnable = self.run_queue() - queued0
        return timers


class Stop(Exception):
    """Every rank stops with exit status 2; rank 0 says why in one line."""


def checked_plan(comm: Any, directory: Path) -> Plan:
    """The plan, checked by every rank (its own sub-models) before anything is allocated; a
    :class:`Stop` on every rank, with the first rank's reason, when any rank finds it wrong."""
    try:
        plan = read_plan(directory, comm.Get_rank(), host_memory_bytes())
        error = None
        if comm.Get_size() != len(plan.ranks):
            error = (
                f"the deployment has {len(plan.ranks)} ranks but mpiexec started "
                f"{comm.Get_size()}: run it with mpiexec -n {len(plan.ranks)}"
            )
    except DseError as exc:
        error = str(exc)
    errors = comm.allgather(error)
    first = next((e for e in errors if e), None)
    if first is not None:
        raise Stop(first)
    return plan


def load_rank(comm: Any, plan: Plan, directory: Path) -> Rank:
    """This rank's sessions and buffers; a :class:`Stop` on every rank when any rank cannot
    load its sub-models (onnxruntime refuses one, no CUDA here...)."""
    me, error = None, None
    try:
        me = Rank(comm, plan, directory)
    except DseError as exc:
        error = f"rank {comm.Get_rank()}: {exc}"
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors: one line, every rank
        text = str(exc).strip().splitlines()
        error = f"rank {comm.Get_rank()}: onnxruntime cannot load its sub-models: " + (
            text[0][:300] if text else exc.__class__.__name__
        )
    first = next((e for e in comm.allgather(error) if e), None)
    if first is not None or me is None:
        raise Stop(f"{directory}: {first}")
    return me


def measure(
    directory: Path,
    warmup: int | None = None,
    iterations: int | None = None,
    kill: int = -1,
    stream: int | None = None,
) -> Measurement | None:
    """Run the deployment in ``directory`` on MPI.COMM_WORLD; rank 0 returns the measurement
    (and writes it), other ranks None. A :class:`Stop` on every rank when the plan is wrong, or
    when the outputs differ from the whole model's or could not be checked (the measurement is
    written first). ``kill`` is a test hook: that rank kills itself (SIGKILL) after its first
    measured iteration."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    plan = checked_plan(comm, directory)
    settings = plan.run or RunSettings()
    warmup = settings.warmup if warmup is None else warmup
    iterations = settings.iterations if iterations is None else iterations
    stream = settings.stream if stream is None else stream
    resettable = reset_peak_rss()
    # just reset: the current RSS, before any sub-model loads (unknown where it cannot reset)
    start_rss = peak_rss_mb() if resettable else None
    start_file = rss_file_mb()
    t0 = time.perf_counter()
    me = load_rank(comm, plan, directory)
    load_s = time.perf_counter() - t0
    peak_load = peak_rss_mb()
    reset_peak_rss()
    meter = energy_meter()
    latencies: list[float] = []
    timers: list[Timers] = []
    energy_start = None
    for it in range(warmup + iterations):
        if it == warmup:
            energy_start = meter.read() if meter.available else None
        me.waits.barrier()
        start = time.perf_counter()
        t = me.run_once()
        mine = time.perf_counter() - start
        longest = me.waits.max(mine)
        if it >= warmup:
            latencies.append(longest)
            timers.append(t)
        if it == warmup and me.rank == kill:
            os.kill(os.getpid(), 9)
    energy = meter.per_iteration(energy_start, iterations) if meter.available else None
    # one inference's peak, as the model predicts it: read before frames overlap, whose
    # tensors in flight (up to the stream's window of frames) are held at once
    peak_run = peak_rss_mb()
    period = peak_stream = None
    if stream > 1:  # frames back to back, several in flight: the pipelined period
        reset_peak_rss()
        me.waits.barrier()
        period = me.waits.max(me.stream(stream))
        peak_stream = peak_rss_mb()

    def mb(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    figures = RankFigures(
        rank=me.rank,
        device=me.spec.device,
        host=me.spec.host,
        hostname=socket.gethostname(),
        kind=me.spec.kind,
        threads=me.spec.threads,
        segments=len(me.spec.segments),
        load_s=round(load_s, 4),
        compute_ms=stats([t.compute for t in timers]),
        communication_ms=stats([t.communication for t in timers]),
        wait_ms=stats([t.wait for t in timers]),
        cpu_ms=stats([t.cpu for t in timers]),
        runnable_ms=stats([t.runnable for t in timers]),
        bytes_sent=int(timers[-1].sent) if timers else 0,
        rss_start_mb=mb(start_rss),
        rss_start_file_mb=mb(start_file),
        peak_rss_loading_mb=mb(peak_load),
        peak_rss_running_mb=mb(peak_run),
        peak_rss_separate=resettable,
        peak_rss_stream_mb=mb(peak_stream),
        energy_j=energy,
        energy_reason=None if meter.available else meter.reason,
        # a counter covers the whole host (RAPL package) or board (INA3221), not this rank
        energy_scope=meter.kind,
    )
    # small records of figures (tensors never go pickled); rank 0 gets every rank's
    ranks: list[RankFigures] = comm.gather(figures, root=0) or []
    outputs = _gather_outputs(comm, plan, me)
    result: Measurement | None = None
    reason = None
    if me.rank == 0:
        result = _result(plan, ranks, warmup, iterations, latencies, outputs, directory)
        if period is not None:
            result.stream = Stream(stream, round(period * 1e3, 4))
        write_measurements(directory, result)
        reason = result.reason
    reason = comm.bcast(reason, root=0)
    if reason is not None:
        raise Stop(f"{directory}: {reason} (figures in {MEASUREMENTS})")
    return result


def _result(
    plan: Plan,
    ranks: list[RankFigures],
    warmup: int,
    iterations: int,
    latencies: list[float],
    outputs: dict[str, np.ndarray],
    directory: Path,
) -> Measurement:
    eq = equivalence(plan, outputs, directory)
    reason = verdict(eq)
    return Measurement(
        status="ok" if reason is None else "failed",
        reason=reason,
        net=plan.net,
        fingerprint=plan.fingerprint,
        mapping_hash=plan.mapping_hash,
        ranks_count=len(ranks),
        warmup=warmup,
        iterations=iterations,
        latency_ms=Latency(**vars(stats(latencies)), all=[round(x * 1e3, 4) for x in latencies]),
        ranks=ranks,
        equivalence=eq,
    )


def _gather_outputs(comm: Any, plan: Plan, me: Rank) -> dict[str, np.ndarray]:
    """The last iteration's graph outputs, sent to rank 0 with the buffer API."""
    got: dict[str, np.ndarray] = {}
    for k, o in enumerate(plan.outputs):
        if o.rank == 0 and me.rank == 0:
            got[o.name] = np.array(me.local[o.name])
        elif me.rank == o.rank:
            comm.Send(np.ascontiguousarray(me.local[o.name]), dest=0, tag=OUTPUT_TAG + k)
        elif me.rank == 0:
            buf = np.empty(o.shape, o.dtype)
            comm.Recv(buf, source=o.rank, tag=OUTPUT_TAG + k)
            got[o.name] = buf
    return got
