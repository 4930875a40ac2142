"""The schedule of a batch of mappings (:func:`simulate`) and its figures
(:class:`ScheduleResult`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from dse.mapping.rules import dense_one
from models_analytical.schedule.compiled import compiled
from models_analytical.schedule.layer import run_layer
from models_analytical.schedule.memory import held_buffers, memory_peaks
from models_analytical.schedule.parts import assign_parts, host_slowdown
from models_analytical.schedule.segments import count_segments
from models_analytical.schedule.state import new_state, reset_state


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


@compiled(_nrt=False)
def simulate_one(k_in, share, owner, st):
    """The schedule of one mapping (``share[L, D]``, ``owner[L]``) in ``st``, which holds its
    figures after; returns its latency. Its stages are inlined into it, and it allocates
    nothing: compiled without reference counting (``_nrt=False``; numba would otherwise count
    references to every array of the inputs and state at each inlined stage)."""
    reset_state(st)
    assign_parts(k_in, share, st)
    host_slowdown(k_in, st)
    finish = 0.0
    for layer in range(share.shape[0]):
        finish = run_layer(k_in, owner, share, st, layer, finish)
    held_buffers(st)
    memory_peaks(st)
    count_segments(share, st)
    return finish


@compiled(parallel=True, nogil=False)
def simulate(device, sizes, channels, consumer, producer, w_class, with_weights, k_in, n_chunks):
    """The schedule of every mapping (:class:`dse.mapping.Mappings`: ``device[P, L]``, -1 for
    splittable layers, and ``sizes[P, S, D]``); ``channels[L]`` the layers' output channels,
    ``consumer`` / ``producer`` [L] the graph's ``first_consumer`` / ``first_producer``. Each
    mapping's share [L, D] and owner [L] are built in per-chunk scratch
    (:func:`dse.mapping.rules.dense_one`) and scheduled by :func:`simulate_one`. The weights
    each device holds by class are the sum over layers of share x ``w_class[L, C]`` (zeros
    unless ``with_weights``). The mappings run in ``n_chunks`` contiguous chunks (a few per
    thread), each allocating its scratch and state once."""
    n_pop, n_layers = device.shape
    n_dev = sizes.shape[2]
    n_cls = w_class.shape[1]
    # plain arrays while the chunks fill them (numba's parallel loops lose writes made through
    # a namedtuple's fields), named once done
    latency = np.zeros(n_pop)
    busy = np.zeros((n_pop, n_dev))
    comm = np.zeros((n_pop, n_dev))
    peak = np.zeros((n_pop, n_dev))
    energy = np.zeros((n_pop, n_dev))
    parts = np.zeros((n_pop, n_dev), dtype=np.int64)
    sent = np.zeros((n_pop, n_dev))
    segments = np.zeros((n_pop, n_dev), dtype=np.int64)
    held = np.zeros((n_pop, n_dev))
    weights = np.zeros((n_pop, n_dev, n_cls))
    n_chunks = max(min(n_chunks, n_pop), 1)
    for chunk in prange(n_chunks):
        lo = chunk * n_pop // n_chunks
        hi = (chunk + 1) * n_pop // n_chunks
        share = np.zeros((n_layers, n_dev))
        owner = np.empty(n_layers, dtype=np.int64)
        anchor = np.empty(n_layers, dtype=np.int64)
        st = new_state(k_in, n_layers, n_dev)
        for p in range(lo, hi):
            dense_one(device[p], sizes[p], channels, consumer, producer, share, owner, anchor)
            latency[p] = simulate_one(k_in, share, owner, st)
            busy[p] = st.busy
            comm[p] = st.comm
            peak[p] = st.peak
            energy[p] = st.energy
            parts[p] = st.parts
            sent[p] = st.bytes_sent
            segments[p] = st.segments
            held[p] = st.held
            # weights by class (layer by layer, leaving out the zero shares einsum adds), then
            # the scratch back to zeros: only the entries this mapping set
            for layer in range(n_layers):
                d0 = device[p, layer]
                lo_d, hi_d = (d0, d0 + 1) if d0 >= 0 else (0, n_dev)
                for d in range(lo_d, hi_d):
                    sh = share[layer, d]
                    if sh > 0.0:
                        if with_weights:
                            for c in range(n_cls):
                                weights[p, d, c] += sh * w_class[layer, c]
                        share[layer, d] = 0.0
    return ScheduleResult(latency, busy, comm, peak, energy, parts, sent, segments, held, weights)
