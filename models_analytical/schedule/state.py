"""The schedule's working state for one mapping (:class:`ScheduleState`): arrays allocated once
per chunk of mappings and reset before each."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from models_analytical.schedule.compiled import stage

#: Slots of the table of pieces received in one mapping (tensor, device, rows): a piece
#: received again is not sent again, as the runtime sends a tensor to a device once. Beyond
#: three quarters of them filled (some thousands of bands' halos), a piece is counted again.
#: Small arrays on purpose: a table per (tensor, device) of a few pieces, large for a large
#: network and mostly untouched, made the kernel slower in some processes.
PIECES = 1024


class ScheduleState(NamedTuple):
    """What the stages read and write while scheduling one mapping (a numba namedtuple of
    arrays: the fields are fixed, their contents change). L layers, D devices, T tensors."""

    # where each layer's parts run (parts.assign_parts, parts.host_slowdown)
    row: np.ndarray  # int64 [L] the layer whose shares l runs with: its own, or (a layer that
    # follows a split one) the split layer's
    part_count: np.ndarray  # int64 [L] parts of row r (0 for a layer on another's parts)
    part_device: np.ndarray  # int64 [L, D] the devices of row r's parts, in index order
    slowdown: np.ndarray  # [D] work factor of each device's latest part (shared_host_factor or 1)
    # rows (dse.mapping.rows.row_layout): where layers run on bands of rows
    root: np.ndarray  # int64 [L] the root split by rows whose bands the layer runs on, -1
    band_lo: np.ndarray  # int64 [L, D] each device's output rows of such a layer: from ...
    band_hi: np.ndarray  # int64 [L, D] ... to (0, 0: none)
    keep: np.ndarray  # bool [L] the layer's output stays as bands (readers fetch their rows)
    band_ready: np.ndarray  # [L, D] when the device's band of the layer is made
    rows_on: np.ndarray  # bool [1] some layer of this mapping splits by rows
    gen: np.ndarray  # int64 [1] the mappings with rows so far: a slot of the table is filled
    # in this mapping when its piece_gen is this
    piece_gen: np.ndarray  # int64 [PIECES] (a hash table, open addressing)
    piece_key: np.ndarray  # int64 [PIECES, 4] tensor, device, first row, end row
    piece_at: np.ndarray  # [PIECES] when it was in
    piece_count: np.ndarray  # int64 [1] slots filled in this mapping
    frac: np.ndarray  # [D] each device's fraction of the layer being scheduled (its part)
    # timeline: seconds from the start of the inference
    ready: np.ndarray  # [L] each layer's whole output is ready on its owner
    dev_free: np.ndarray  # [D] the device has done all its work so far
    first_start: np.ndarray  # [D] the device's first step of the inference started (work, a
    # send, a receive that occupies it; -1: none yet; timeline.begin)
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
    # gather and after a send's deadline (dse.runtime.compile.partition.send_deadlines)
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
    Allocated by numpy, not compiled: compiled, its arrays of several kinds would lengthen
    numba's first compilation, for no speed: it runs once per chunk.

    Its arrays are views of one buffer, each at a fixed offset from the buffer's first page
    (:func:`_layout`): allocated one by one, where the heap put them decided the kernel's
    speed, the same code running faster in one process than in another (two arrays read and
    written together whose addresses differ by a multiple of 4 KiB make the CPU take a load for
    a store it waits on); with the layout fixed, every process runs as the fast ones did."""
    n_tensors = int(k_in.in_tensor.max()) + 1 if k_in.in_tensor.size else 0
    L, D, T = n_layers, n_dev, n_tensors
    i64, b = np.int64, np.bool_
    specs = [  # name, shape, dtype, initial value (None: left as it is)
        ("row", (L,), i64, None),
        ("part_count", (L,), i64, 0),
        ("part_device", (L, D), i64, None),
        ("slowdown", (D,), np.float64, 1),
        ("root", (L,), i64, -1),
        ("band_lo", (L, D), i64, 0),
        ("band_hi", (L, D), i64, 0),
        ("keep", (L,), b, 0),
        ("band_ready", (L, D), np.float64, 0),
        ("rows_on", (1,), b, 0),
        ("gen", (1,), i64, 0),
        ("piece_gen", (PIECES,), i64, 0),
        ("piece_key", (PIECES, 4), i64, 0),
        ("piece_at", (PIECES,), np.float64, 0),
        ("piece_count", (1,), i64, 0),
        ("frac", (D,), np.float64, 0),
        ("ready", (L,), np.float64, 0),
        ("dev_free", (D,), np.float64, 0),
        ("link_free", (k_in.n_queues,), np.float64, 0),
        ("part_end", (D,), np.float64, 0),
        ("arrival", (T, D), np.float64, -1.0),
        ("gather_in", (D,), np.float64, 0),
        ("need", (D,), b, 0),
        ("gatherers", (D,), i64, None),
        ("mem_delta", (D, L + 1), np.float64, 0),
        ("kept", (T, D), b, 0),
        ("tensor_bytes", (T,), np.float64, 0),
        ("sent_whole", (T,), b, 0),
        ("has_memory", (D,), b, 0),
        ("receives_at", (D, L), b, 0),
        ("ends_at", (D, L), b, 0),
        ("gathers_at", (D, L), b, 0),
        ("seg_current", (D,), i64, -1),
        ("seg_last", (D,), i64, -1),
        ("seg_of", (D, L), i64, -1),
        ("seg_starts", (D, L), b, 0),
        ("part_list", (D, L), i64, None),
        ("taken_in", (T, D), i64, -1),
        ("out_charged", (L,), b, 0),
        ("busy", (D,), np.float64, 0),
        ("comm", (D,), np.float64, 0),
        ("energy", (D,), np.float64, 0),
        ("bytes_sent", (D,), np.float64, 0),
        ("parts", (D,), i64, 0),
        ("segments", (D,), i64, 0),
        ("slicers", (D,), i64, 0),
        ("peak", (D,), np.float64, 0),
        ("held", (D,), np.float64, 0),
        ("first_start", (D,), np.float64, -1.0),  # last: the arrays above keep their offsets
    ]
    return ScheduleState(**_layout(specs))


#: Each array of a state starts a cache line (64 bytes) after a multiple of 64 from the end of
#: the one before, shifted by a further (i x 7 mod 31) lines: arrays near each other in the
#: list do not start at one offset within a page whatever their sizes (the shifts repeat only
#: every 31 arrays).
LINE = 64


def _layout(specs: list) -> dict[str, np.ndarray]:
    """The arrays of ``specs`` as views of one page-aligned buffer (:func:`new_state`)."""
    offsets, at = [], 0
    for i, (_, shape, dtype, _) in enumerate(specs):
        offsets.append(at)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        at += -(-nbytes // LINE) * LINE + LINE * (1 + (i * 7) % 31)
    raw = np.empty(at + 4096, dtype=np.uint8)
    start = -raw.ctypes.data % 4096
    out = {}
    for (name, shape, dtype, fill), off in zip(specs, offsets, strict=True):
        a = np.ndarray(shape, dtype=dtype, buffer=raw, offset=start + off)
        if fill is not None:
            a.fill(fill)
        out[name] = a
    return out


@stage
def reset_state(st):
    """Every field back to its value before the first step (fields fully written before they
    are read are left as they are: row, part_device, gatherers, part_list)."""
    st.part_count[:] = 0
    st.slowdown[:] = 1.0
    st.ready[:] = 0.0
    st.dev_free[:] = 0.0
    st.first_start[:] = -1.0
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
