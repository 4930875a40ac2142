"""The schedule's working state for one mapping (:class:`ScheduleState`): arrays allocated once
per chunk of mappings and reset before each."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from models_analytical.schedule.compiled import stage

#: Pieces of one tensor a device's bands remember having received (a halo from above and one
#: from below, and the rows of a few layers reading it): a piece received again is not sent
#: again, as the runtime sends a tensor to a device once. Beyond this many, one is counted
#: again.
PIECES = 8


class ScheduleState(NamedTuple):
    """What the stages read and write while scheduling one mapping (a numba namedtuple of
    arrays: the fields are fixed, their contents change). L layers, D devices, T tensors."""

    # where each layer's parts run (parts.assign_parts, parts.host_slowdown)
    row: np.ndarray  # int64 [L] the layer whose shares l runs with: its own, or (a layer that
    # follows a split one) the split layer's
    part_count: np.ndarray  # int64 [L] parts of row r (0 for a layer on another's parts)
    part_device: np.ndarray  # int64 [L, D] the devices of row r's parts, in index order
    computes: np.ndarray  # bool [D] some part runs on the device
    on_host: np.ndarray  # int64 [D] devices computing on each host (by host index)
    slowdown: np.ndarray  # [D] work factor of each device (shared_host_factor or 1)
    # rows (dse.mapping.rows.row_layout): where layers run on bands of rows
    root: np.ndarray  # int64 [L] the root split by rows whose bands the layer runs on, -1
    band_lo: np.ndarray  # int64 [L, D] each device's output rows of such a layer: from ...
    band_hi: np.ndarray  # int64 [L, D] ... to (0, 0: none)
    keep: np.ndarray  # bool [L] the layer's output stays as bands (readers fetch their rows)
    band_ready: np.ndarray  # [L, D] when the device's band of the layer is made
    rows_on: np.ndarray  # bool [1] some layer of this mapping splits by rows
    piece_n: np.ndarray  # int64 [T, D] pieces of rows of tensor t device d received (a few)
    piece_lo: np.ndarray  # int64 [T, D, PIECES] their rows: from ...
    piece_hi: np.ndarray  # int64 [T, D, PIECES] ... to
    piece_at: np.ndarray  # [T, D, PIECES] when each was in
    frac: np.ndarray  # [D] each device's fraction of the layer being scheduled (its part)
    # timeline: seconds from the start of the inference
    ready: np.ndarray  # [L] each layer's whole output is ready on its owner
    dev_free: np.ndarray  # [D] the device has done all its work so far
    link_free: np.ndarray  # [queues] each link queue is free (KernelInputs.queue_send)
    part_end: np.ndarray  # [D] the device's last part (of the current layer) ended
    arrival: np.ndarray  # [T, D] tensor t is whole on device d (-1: not there yet)
    gather_in: np.ndarray  # [D] every part a gatherer concatenates has arrived
    need: np.ndarray  # bool [D] the device reads the split layer's whole output
    gatherers: np.ndarray  # int64 [D] the devices that concatenate the current layer's parts
    # memory
    mem_delta: np.ndarray  # [D, L+1] bytes allocated (+) and freed (-) before each step
    kept: np.ndarray  # bool [T, D] a buffer of tensor t is kept on d for good
    tensor_bytes: np.ndarray  # [T] bytes of tensor t where it is kept
    sent_whole: np.ndarray  # bool [T] the whole tensor is held until its sends complete
    has_memory: np.ndarray  # bool [D] devices whose memory deltas are not all zero
    # sub-models (segments) as the runtime cuts them: before a step that receives, after a
    # gather and after a send's deadline (dse.runtime.partition.send_deadlines)
    receives_at: np.ndarray  # bool [D, L] d receives an input for its part of layer l
    ends_at: np.ndarray  # bool [D, L] d's sub-model ends after layer l
    gathers_at: np.ndarray  # bool [D, L] d gathers layer l's parts
    seg_current: np.ndarray  # int64 [D] the sub-model running, -1 once closed (a send's
    # deadline or a gather)
    seg_last: np.ndarray  # int64 [D] the last number given to a sub-model of the device
    seg_of: np.ndarray  # int64 [D, L] the sub-model d's part of layer l ran in
    seg_starts: np.ndarray  # bool [D, L] d's part of layer l starts a sub-model
    part_list: np.ndarray  # int64 [D, L] each device's parts (layers), in order
    taken_in: np.ndarray  # int64 [T, D] the part (layer) that last took tensor t into its
    # sub-model on d (charged; seg_of gives the sub-model), -1: none
    out_charged: np.ndarray  # bool [L] layer l's whole output was charged as leaving its
    # sub-model
    # the figures of each device
    busy: np.ndarray  # [D] seconds of work
    comm: np.ndarray  # [D] seconds its transfers (sent or received) occupied links
    energy: np.ndarray  # [D] joules, without idle
    bytes_sent: np.ndarray  # [D]
    parts: np.ndarray  # int64 [D] parts run (also the length of part_list's row)
    segments: np.ndarray  # int64 [D] sub-models
    slicers: np.ndarray  # int64 [D] ... of them that only cut rows of a tensor it holds whole
    # for other devices' bands (the image, a gathered tensor: no computation of its makes it)
    peak: np.ndarray  # [D] activation + weight liveness peak, bytes
    held: np.ndarray  # [D] bytes of the buffers the runtime keeps for good


def new_state(k_in, n_layers: int, n_dev: int) -> ScheduleState:
    """A state for mappings of ``n_layers`` layers on ``n_dev`` devices (reset it before use).
    Allocated by numpy, not compiled: compiled, its 37 arrays of 5 kinds took 5 s of numba's
    first compilation (CPU time, loaded machine), for no speed: it runs once per chunk."""
    n_tensors = int(k_in.in_tensor.max()) + 1 if k_in.in_tensor.size else 0
    L, D, T = n_layers, n_dev, n_tensors
    i64, b = np.int64, np.bool_
    return ScheduleState(
        row=np.empty(L, dtype=i64),
        part_count=np.zeros(L, dtype=i64),
        part_device=np.empty((L, D), dtype=i64),
        computes=np.zeros(D, dtype=b),
        on_host=np.zeros(D, dtype=i64),
        slowdown=np.ones(D),
        root=np.full(L, -1, dtype=i64),
        band_lo=np.zeros((L, D), dtype=i64),
        band_hi=np.zeros((L, D), dtype=i64),
        keep=np.zeros(L, dtype=b),
        band_ready=np.zeros((L, D)),
        rows_on=np.zeros(1, dtype=b),
        piece_n=np.zeros((T, D), dtype=i64),
        piece_lo=np.zeros((T, D, PIECES), dtype=i64),
        piece_hi=np.zeros((T, D, PIECES), dtype=i64),
        piece_at=np.zeros((T, D, PIECES)),
        frac=np.zeros(D),
        ready=np.zeros(L),
        dev_free=np.zeros(D),
        link_free=np.zeros(k_in.n_queues),
        part_end=np.zeros(D),
        arrival=np.full((T, D), -1.0),
        gather_in=np.zeros(D),
        need=np.zeros(D, dtype=b),
        gatherers=np.empty(D, dtype=i64),
        mem_delta=np.zeros((D, L + 1)),
        kept=np.zeros((T, D), dtype=b),
        tensor_bytes=np.zeros(T),
        sent_whole=np.zeros(T, dtype=b),
        has_memory=np.zeros(D, dtype=b),
        receives_at=np.zeros((D, L), dtype=b),
        ends_at=np.zeros((D, L), dtype=b),
        gathers_at=np.zeros((D, L), dtype=b),
        seg_current=np.full(D, -1, dtype=i64),
        seg_last=np.full(D, -1, dtype=i64),
        seg_of=np.full((D, L), -1, dtype=i64),
        seg_starts=np.zeros((D, L), dtype=b),
        part_list=np.empty((D, L), dtype=i64),
        taken_in=np.full((T, D), -1, dtype=i64),
        out_charged=np.zeros(L, dtype=b),
        busy=np.zeros(D),
        comm=np.zeros(D),
        energy=np.zeros(D),
        bytes_sent=np.zeros(D),
        parts=np.zeros(D, dtype=i64),
        segments=np.zeros(D, dtype=i64),
        slicers=np.zeros(D, dtype=i64),
        peak=np.zeros(D),
        held=np.zeros(D),
    )


@stage
def reset_state(st):
    """Every field back to its value before the first step (fields fully written before they
    are read are left as they are: row, part_device, gatherers, part_list)."""
    st.part_count[:] = 0
    st.computes[:] = False
    st.on_host[:] = 0
    st.slowdown[:] = 1.0
    st.ready[:] = 0.0
    st.dev_free[:] = 0.0
    st.link_free[:] = 0.0
    st.part_end[:] = 0.0
    st.arrival[:] = -1.0
    st.gather_in[:] = 0.0
    st.need[:] = False
    st.mem_delta[:] = 0.0
    st.kept[:] = False
    st.tensor_bytes[:] = 0.0
    st.sent_whole[:] = False
    st.has_memory[:] = False
    st.receives_at[:] = False
    st.ends_at[:] = False
    st.gathers_at[:] = False
    st.seg_current[:] = -1
    st.seg_last[:] = -1
    st.seg_of[:] = -1
    st.seg_starts[:] = False
    st.taken_in[:] = -1
    st.out_charged[:] = False
    st.busy[:] = 0.0
    st.comm[:] = 0.0
    st.energy[:] = 0.0
    st.bytes_sent[:] = 0.0
    st.parts[:] = 0
    st.segments[:] = 0
    st.slicers[:] = 0
    st.peak[:] = 0.0
    st.held[:] = 0.0
