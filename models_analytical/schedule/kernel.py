"""The schedule of a batch of mappings (:func:`simulate`) and its figures
(:class:`ScheduleResult`)."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numba import types

from dse.mapping.mappings import AXES
from dse.mapping.rules import dense_one
from models_analytical.schedule.bands import layout_rows, no_rows
from models_analytical.schedule.compiled import compiled, in_cache, one_compiler, stage
from models_analytical.schedule.layer import run_layer, run_parts_layer
from models_analytical.schedule.memory import held_buffers, memory_peaks
from models_analytical.schedule.parts import assign_parts
from models_analytical.schedule.segments import count_segments
from models_analytical.schedule.state import new_state, reset_state

ROWS = AXES.index("rows")  # Mappings.axis of a layer split by rows


class ScheduleResult(NamedTuple):
    """The figures of P mappings on D devices."""

    latency_s: np.ndarray  # [P] makespan of one inference
    busy_s: np.ndarray  # [P, D] work (layers, concatenations, sub-model costs)
    comm_s: np.ndarray  # [P, D] time its transfers (sent or received) occupied links
    peak_bytes: np.ndarray  # [P, D] activation + weight liveness peak
    energy_j: np.ndarray  # [P, D] without idle
    parts: np.ndarray  # int64 [P, D] parts run
    bytes_sent: np.ndarray  # [P, D]
    segments: np.ndarray  # int64 [P, D] sub-models the runtime cuts the device's work into
    held_bytes: np.ndarray  # [P, D] buffers the runtime keeps for good (what a device
    # receives or gathers, the input image where it enters; not in the peak)
    weights_mb: np.ndarray  # [P, D, weight classes] weights each device holds, by class
    span_s: np.ndarray  # [P, D] from the device's first step of an inference (work, a send, a
    # receive that occupies it) to the end of its last work, waits included: the runtime runs
    # one inference's steps on a rank before the next one's, so inferences pushed back to
    # back follow each other no faster on it


@stage
def simulate_one(k_in, share, owner, sizes, axis, st):
    """The schedule of one mapping (``share[L, D]``, ``owner[L]``; its ``sizes[S, D]`` and
    ``axis[S]`` for the bands of layers split by rows) in ``st``, which holds its figures
    after; returns its latency. Its stages are inlined into it, and it into
    :func:`simulate_chunk`."""
    reset_state(st)
    layout_rows(k_in, sizes, axis, st)
    assign_parts(k_in, share, st)
    finish = 0.0
    for layer in range(share.shape[0]):
        finish = run_layer(k_in, owner, share, st, layer, finish)
    held_buffers(st)
    memory_peaks(st)
    count_segments(share, st)
    return finish


@stage
def simulate_one_without_rows(k_in, share, owner, st):
    """:func:`simulate_one` for a mapping that splits no layer by rows: the same stages but
    the bands' (most of the kernel's first compilation)."""
    reset_state(st)
    no_rows(st)
    assign_parts(k_in, share, st)
    finish = 0.0
    for layer in range(share.shape[0]):
        finish = run_parts_layer(k_in, owner, share, st, layer, finish)
    held_buffers(st)
    memory_peaks(st)
    count_segments(share, st)
    return finish


@compiled(_nrt=False)
def simulate_chunk(
    device,
    sizes,
    axis,
    units,
    consumer,
    producer,
    w_class,
    with_weights,
    with_rows,
    k_in,
    out,
    lo,
    hi,
    step,
    scratch,
):
    """The schedule of mappings ``lo``, ``lo + step``, ... before ``hi`` of the batch
    (:class:`dse.mapping.Mappings`: ``device[P, L]``, -1 for splittable layers,
    ``sizes[P, S, D]`` and ``axis[P, S]``) into their rows of ``out`` (a
    :class:`ScheduleResult` of zeros); ``units[2, L]`` the layers' output channels and rows
    (:func:`dse.mapping.mappings.layer_units`), ``consumer`` / ``producer`` [L] the graph's
    ``first_consumer`` / ``first_producer``. Each mapping's share [L, D] and owner [L] are
    built in ``scratch`` (:func:`new_scratch`, one per thread: share zeros, owner, anchor, the
    state) by :func:`dse.mapping.rules.dense_one` and scheduled by :func:`simulate_one`. The
    weights each device holds by class are the sum over layers of share x ``w_class[L, C]`` (a
    layer on bands of rows: its whole weights on every band's device; zeros unless
    ``with_weights``). ``with_rows``: None when no mapping of the batch splits a layer by rows,
    else True; numba prunes the branch not taken before it inlines the stages, so a batch without
    rows runs (and compiles) :func:`simulate_one_without_rows`, a specialisation of its own.
    Runs without the GIL: the chunks of a batch run on threads.

    It allocates nothing (its caller does) and is compiled without reference counting
    (``_nrt=False``; numba would otherwise count references to every array of the inputs and
    state at each inlined stage). One compiled function: with :func:`simulate_one` compiled
    apart, LLVM optimised and generated its code twice, alone and again linked into this."""
    n_layers = device.shape[1]
    n_dev = sizes.shape[2]
    n_cls = w_class.shape[1]
    share, owner, anchor, st = scratch
    for p in range(lo, hi, step):
        dense_one(device[p], sizes[p], axis[p], units, consumer, producer, share, owner, anchor)
        if with_rows is None:
            out.latency_s[p] = simulate_one_without_rows(k_in, share, owner, st)
        else:
            out.latency_s[p] = simulate_one(k_in, share, owner, sizes[p], axis[p], st)
        for d in range(n_dev):  # element by element: a row copy compiles its shape checks
            out.busy_s[p, d] = st.busy[d]
            out.comm_s[p, d] = st.comm[d]
            out.peak_bytes[p, d] = st.peak[d]
            out.energy_j[p, d] = st.energy[d]
            out.parts[p, d] = st.parts[d]
            out.bytes_sent[p, d] = st.bytes_sent[d]
            out.segments[p, d] = st.segments[d]
            out.held_bytes[p, d] = st.held[d]
            if st.first_start[d] >= 0.0:
                out.span_s[p, d] = st.dev_free[d] - st.first_start[d]
        # weights by class (layer by layer, leaving out the zero shares einsum adds), then the
        # scratch back to zeros: only the entries this mapping set
        rows = st.rows_on[0]
        for layer in range(n_layers):
            banded = rows and st.root[layer] >= 0
            d0 = device[p, layer]
            lo_d, hi_d = (d0, d0 + 1) if d0 >= 0 else (0, n_dev)
            for d in range(lo_d, hi_d):
                sh = share[layer, d]
                if sh > 0.0:
                    if with_weights and not banded:
                        for c in range(n_cls):
                            out.weights_mb[p, d, c] += sh * w_class[layer, c]
                    share[layer, d] = 0.0
            if with_weights and banded:
                for d in range(n_dev):
                    if st.band_hi[layer, d] > st.band_lo[layer, d]:
                        for c in range(n_cls):
                            out.weights_mb[p, d, c] += w_class[layer, c]


def variant(with_rows: bool) -> Callable[[tuple], bool]:
    """Whether argument types of :func:`simulate_chunk` are those of batches with (or without)
    layers split by rows."""
    at = list(inspect.signature(simulate_chunk.py_func).parameters).index("with_rows")
    return lambda sig: isinstance(sig[at], types.NoneType) != with_rows


def kernel_in_cache(with_rows: bool) -> bool | None:
    """Whether numba's cache holds :func:`simulate_chunk` compiled for batches with (or
    without) layers split by rows (:func:`~models_analytical.schedule.compiled.in_cache`)."""
    return in_cache(simulate_chunk, variant(with_rows))


#: The variants of :func:`simulate_chunk` (with row splits: True) this process has run.
_RUN: set[bool] = set()


def new_scratch(k_in, n_layers: int, n_dev: int) -> tuple:
    """What :func:`simulate_chunk` works in: share [L, D] zeros, owner and anchor [L], a
    state. Allocated by numpy: compiled, its allocations would lengthen numba's first
    compilation, for no speed (once per thread)."""
    return (
        np.zeros((n_layers, n_dev)),
        np.empty(n_layers, dtype=np.int64),
        np.empty(n_layers, dtype=np.int64),
        new_state(k_in, n_layers, n_dev),
    )


#: Thread pools working on a batch beside the calling thread, by size (made when first needed).
_POOLS: dict[int, ThreadPoolExecutor] = {}
#: Chunks of a batch per thread: enough that a thread that starts late takes fewer.
CHUNKS_PER_THREAD = 4


def simulate(
    device,
    sizes,
    axis,
    units,
    consumer,
    producer,
    w_class,
    with_weights,
    k_in,
    threads,
    scratch=None,
):
    """The schedule of every mapping of the batch (arguments as :func:`simulate_chunk`'s) on
    ``threads`` threads: the batch in chunks of interleaved mappings (chunk c of n: mappings
    c, c + n, c + 2n, ..., so mappings of unequal cost spread evenly), taken one after another
    by the calling thread and by pool threads while the compiled code has released the GIL.

    ``scratch``: a list of :func:`new_scratch` results for mappings of this shape and
    ``k_in``, one per thread, kept by the caller from batch to batch (grown here when short):
    a chunk leaves its scratch as it found it (share zeros; the state is reset before each
    mapping). Batches that share a list must not run at the same time.

    Threads of this process rather than numba's parallel loops: the same figures (each mapping
    is scheduled alone, by the same compiled code), and no parallel loop to compile (one made
    a large share of the kernel's first compilation). The calling thread starts at once and the
    chunks go to whichever thread is free: a pool thread asleep between generations can wake
    milliseconds late, which a batch whose every chunk waits for the pool would wait too
    (``docs/results/performance.md``, "A search at the thesis's settings")."""
    n_pop = device.shape[0]
    n_dev = sizes.shape[2]
    out = ScheduleResult(
        np.zeros(n_pop),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev), dtype=np.int64),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev), dtype=np.int64),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev, w_class.shape[1])),
        np.zeros((n_pop, n_dev)),
    )
    with_rows = True if (axis == ROWS).any() else None
    args = (device, sizes, axis, units, consumer, producer, w_class, with_weights, with_rows)
    args = (*args, k_in, out)
    rows = with_rows is not None
    if rows not in _RUN:  # its first batch: compiled here, or read from the cache
        with one_compiler(simulate_chunk, variant(rows), "-rows" if rows else ""):
            simulate_chunk(*args, 0, 0, 1, new_scratch(k_in, device.shape[1], n_dev))
        _RUN.add(rows)
    n_threads = max(min(threads, n_pop), 1)
    if scratch is None:
        scratch = []
    while len(scratch) < n_threads:
        scratch.append(new_scratch(k_in, device.shape[1], n_dev))
    if n_threads == 1:
        simulate_chunk(*args, 0, n_pop, 1, scratch[0])
        return out
    n_chunks = min(CHUNKS_PER_THREAD * n_threads, n_pop)
    taken = itertools.count()  # next() is atomic under the GIL: each chunk runs once

    def work(own: tuple) -> None:
        while (c := next(taken)) < n_chunks:
            simulate_chunk(*args, c, n_pop, n_chunks, own)

    pool = _POOLS.get(n_threads - 1)
    if pool is None:
        pool = _POOLS[n_threads - 1] = ThreadPoolExecutor(
            n_threads - 1, thread_name_prefix="dse-model"
        )
    jobs = [pool.submit(work, scratch[t]) for t in range(1, n_threads)]
    try:
        work(scratch[0])
    finally:
        for job in jobs:
            job.result()
    return out
