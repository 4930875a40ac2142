"""Layers split by rows (:mod:`dse.mapping.rows`): each device computes a band of the output
rows from the input rows its band reads (its own, halos from the devices holding the rows next
to it, or a slice of a tensor held whole elsewhere); the bands then go on to the next layer of
the chain, stay where they are for the next layer split by rows over the same devices, or are
gathered as channel parts are."""

from __future__ import annotations

from dse.mapping.rows import row_layout
from models_analytical.schedule.compiled import stage
from models_analytical.schedule.costs import band_share
from models_analytical.schedule.gather import all_gather
from models_analytical.schedule.memory import hold, hold_weights
from models_analytical.schedule.receive import held_whole, receive
from models_analytical.schedule.segments import (
    band_rows,
    end_after_send,
    enter_band_segment,
    same_run,
)
from models_analytical.schedule.state import PIECES
from models_analytical.schedule.timeline import begin, charge, compute, transfer


@stage
def layout_rows(k_in, sizes, axis, st):
    """The mapping's bands (:func:`dse.mapping.rows.row_layout`) when some layer splits by
    rows; else :func:`no_rows`."""
    on = False
    for s in range(axis.size):
        if axis[s] == 1:
            on = True
            break
    if on:
        st.gen[0] += 1  # the table of pieces received starts empty
        st.piece_count[0] = 0
        row_layout(
            sizes,
            axis,
            k_in.split_index,
            k_in.follows,
            k_in.row_chain,
            k_in.row_join,
            k_in.row_stride,
            k_in.row_pad,
            k_in.in_rows,
            k_in.out_rows,
            k_in.in_ptr,
            k_in.in_src,
            k_in.out_ptr,
            k_in.out_dst,
            k_in.is_output,
            st.root,
            st.band_lo,
            st.band_hi,
            st.keep,
        )
        st.rows_on[0] = True
    else:
        no_rows(st)


@stage
def no_rows(st):
    """No layer of the mapping runs on bands (the table is cleared only after a mapping that
    had)."""
    if st.rows_on[0]:
        st.root[:] = -1
        st.keep[:] = False
    st.rows_on[0] = False


@stage
def on_bands(st, src, layer):
    """Whether ``layer`` reads ``src``'s output as bands: the layer before it on the same
    bands, or a chain's output kept as bands."""
    return src >= 0 and st.root[src] >= 0 and (st.root[src] == st.root[layer] or st.keep[src])


@stage
def run_row_layer(k_in, owner, share, st, layer, finish):
    """Schedules ``layer``, which runs on bands: each band once its device is free and its
    rows are in, then its output: continued by the next layer of the chain, kept as bands, or
    gathered. Returns ``finish`` advanced to the layer's last step."""
    n_here = st.part_count[layer]
    rows = max(k_in.out_rows[layer], 1)
    for i in range(n_here):
        d = st.part_device[layer, i]
        st.frac[d] = (st.band_hi[layer, d] - st.band_lo[layer, d]) / rows
    for i in range(n_here):
        d = st.part_device[layer, i]
        t_in = receive_rows(k_in, owner, st, layer, d)
        run_band(k_in, owner, st, layer, d, n_here, t_in)
        st.band_ready[layer, d] = st.part_end[d]
    nxt = k_in.follower[layer]
    if nxt >= 0 and st.root[nxt] == st.root[layer]:
        for i in range(n_here):  # held until the next layer's band reads it
            d = st.part_device[layer, i]
            hold(st, d, layer, nxt + 1, st.frac[d] * k_in.out_bytes[layer])
    elif st.keep[layer]:
        last = 0.0
        for i in range(n_here):  # held until its last reader's band
            d = st.part_device[layer, i]
            hold(st, d, layer, k_in.last_use[layer] + 1, st.frac[d] * k_in.out_bytes[layer])
            if st.band_ready[layer, d] > last:
                last = st.band_ready[layer, d]
        st.ready[layer] = last
    else:
        finish = all_gather(k_in, owner, st, layer, layer, n_here, finish)
    if st.ready[layer] > finish:
        finish = st.ready[layer]
    return finish


@stage
def run_band(k_in, owner, st, layer, d, n_here, t_in):
    """Runs d's band of ``layer`` in a sub-model once d is free and its rows are in: its share
    of the rows' work and what every band pays (``row_fixed``), the layer's fixed per-part cost
    and its sub-model's costs, slower by d's host slowdown; it holds the whole weights."""
    ty = k_in.device_type[d]
    over = enter_band_segment(k_in, owner, st, layer, d)
    s = band_share(k_in, ty, layer, st.frac[d], n_here)
    if n_here > 1:  # bands run side by side
        s *= k_in.split_work_factor[ty]
    compute(k_in, st, layer, d, s * k_in.t_work[ty, layer], over, t_in)
    hold_weights(k_in, st, layer, d, 1.0)


@stage
def receive_rows(k_in, owner, st, layer, d):
    """When the input rows d's band of ``layer`` reads are on d, of each of its inputs (one,
    but for a join): from the devices holding them as bands (d's own rows, and each other's
    overlap sent to d: halos), or a slice of the input held whole elsewhere (sent by its owner,
    the image by the entry device); all of its rows are the whole input, received as a part's
    input is (:func:`receive`). Rows d holds whole already, or received already as the same
    piece, come at no cost. Each piece received lands in a buffer kept for good; a piece sent
    is held on its sender until the end (sends complete there) and ends the sender's sub-model
    after the layer that made it."""
    lo, hi = band_rows(k_in, st, layer, d)
    t_in = 0.0
    for e in range(k_in.in_ptr[layer], k_in.in_ptr[layer + 1]):
        a = receive_edge_rows(k_in, owner, st, layer, d, e, lo, hi)
        if a > t_in:
            t_in = a
    return t_in


@stage
def receive_edge_rows(k_in, owner, st, layer, d, e, lo, hi):
    """:func:`receive_rows` of input edge ``e``: rows ``[lo, hi)`` of its tensor."""
    src = k_in.in_src[e]
    t = k_in.in_tensor[e]
    row_bytes = k_in.in_bytes[e] / max(k_in.in_rows[layer], 1)
    t_in = 0.0
    if on_bands(st, src, layer):
        for h in range(st.band_lo.shape[1]):
            a = max(lo, st.band_lo[src, h])
            b = min(hi, st.band_hi[src, h])
            if b <= a:
                continue
            rdy = st.band_ready[src, h]
            if h != d:
                rdy = piece_in(k_in, owner, st, layer, e, src, h, d, a, b, row_bytes, rdy)
            if rdy > t_in:
                t_in = rdy
        return t_in
    loc, rdy = held_whole(k_in, owner, st, e, src, t)
    if loc == d:
        return rdy
    if st.arrival[t, d] >= 0.0:  # d holds it whole already (received, or gathered)
        return st.arrival[t, d]
    if lo == 0 and hi == k_in.in_rows[layer]:  # every row: the whole input
        return receive(k_in, owner, st, layer, e, loc, d, rdy)
    return piece_in(k_in, owner, st, layer, e, src, loc, d, lo, hi, row_bytes, rdy)


@stage
def piece_in(k_in, owner, st, layer, e, src, h, d, a, b, row_bytes, rdy):
    """Rows ``[a, b)`` of input edge e's tensor (``src``'s output, -1: the image) from h,
    where they are ready at ``rdy``, to d for its band of ``layer``; returns when they are
    in: at once if d received this very piece before (then nothing moves)."""
    t = k_in.in_tensor[e]
    slot = piece_slot(st, t, d, a, b)
    if slot >= 0 and st.piece_gen[slot] == st.gen[0]:
        return st.piece_at[slot]
    nbytes = (b - a) * row_bytes
    gathered = src >= 0 and (st.root[src] >= 0 or st.part_count[st.row[src]] > 1)
    if not on_bands(st, src, layer) and (src < 0 or gathered):
        # h made no computation of it (the image, a gathered tensor): a sub-model of its own
        rdy = slicer(k_in, st, h, k_in.in_bytes[e], rdy)
    if src >= 0:
        dl = src
        if on_bands(st, src, layer):
            dl = piece_deadline(k_in, st, layer, d, h, src)
            rdy = max(rdy, st.band_ready[dl, h])
        rdy = send_piece(k_in, owner, st, h, src, dl, nbytes, rdy)
    else:
        hold(st, h, 0, k_in.out_bytes.size, nbytes)
    arrival = transfer(k_in, st, h, d, nbytes, rdy)
    keep_piece(st, d, layer, nbytes)
    if slot >= 0 and 4 * st.piece_count[0] < 3 * PIECES:
        st.piece_gen[slot] = st.gen[0]
        st.piece_key[slot, 0] = t
        st.piece_key[slot, 1] = d
        st.piece_key[slot, 2] = a
        st.piece_key[slot, 3] = b
        st.piece_at[slot] = arrival
        st.piece_count[0] += 1
    return arrival


@stage
def piece_slot(st, t, d, a, b):
    """The slot of piece (t, d, a, b) in the table of pieces received: where it is, or the
    empty one it would go to; -1 if the table is full."""
    h = (t * 73856093) ^ (d * 19349663) ^ (a * 83492791) ^ (b * 2654435761)
    for probe in range(PIECES):
        i = (h + probe) & (PIECES - 1)
        if st.piece_gen[i] != st.gen[0]:
            return i
        key = st.piece_key
        if key[i, 0] == t and key[i, 1] == d and key[i, 2] == a and key[i, 3] == b:
            return i
    return -1


@stage
def slicer(k_in, st, h, whole_bytes, rdy):
    """Device h cuts rows of a tensor it holds whole but made by no computation of its (the
    image, a gathered tensor) in a sub-model of its own, once it is ready and h is free: its
    run and what it takes in. Returns when the piece is cut."""
    ty = k_in.device_type[h]
    cost = (k_in.segment_run_s[ty] + k_in.segment_in_per_byte_s[ty] * whole_bytes) * st.slowdown[h]
    start = max(rdy, st.dev_free[h])
    begin(st, h, start)
    st.dev_free[h] = start + cost
    st.busy[h] += cost
    st.energy[h] += cost * k_in.overhead_power_w[ty]
    st.slicers[h] += 1
    return start + cost


@stage
def send_piece(k_in, owner, st, h, src, dl, nbytes, rdy):
    """Device h sends ``nbytes`` of ``src``'s output (a slice, made with it): it leaves h's
    sub-model (charged there), which ends after ``dl`` (the send's deadline), and is held on
    h until the end. Returns when it can go."""
    c_out = k_in.segment_out_per_byte_s[k_in.device_type[h]] * nbytes * st.slowdown[h]
    charge(k_in, st, h, c_out)
    hold(st, h, src, k_in.out_bytes.size, nbytes)
    if not st.ends_at[h, dl]:
        end_after_send(k_in, owner, st, h, dl)
    return rdy + c_out


@stage
def piece_deadline(k_in, st, layer, d, h, src):
    """The layer after which h sends d rows of ``src``'s output for d's band of ``layer``:
    ``src``, or, where that band reads rows of other inputs from h too (a join), the latest of
    them h made in the same run of work as ``src`` (no receive or gather on h between): the
    runtime sends them together after it (:func:`dse.runtime.compile.segments.send_deadlines`), as a
    whole tensor's send waits for its reader's other inputs
    (:func:`~models_analytical.schedule.segments.send_deadline`)."""
    lo, hi = band_rows(k_in, st, layer, d)
    dl = src
    for e in range(k_in.in_ptr[layer], k_in.in_ptr[layer + 1]):
        s2 = k_in.in_src[e]
        if s2 <= dl or not on_bands(st, s2, layer):
            continue
        if max(lo, st.band_lo[s2, h]) >= min(hi, st.band_hi[s2, h]):
            continue  # h sends d none of it
        if same_run(st, h, src, s2):
            dl = s2
    return dl


@stage
def keep_piece(st, d, layer, nbytes):
    """A piece d receives for its band of ``layer``: a receive buffer kept for good, and a
    receive that starts d's sub-model for the band."""
    st.held[d] += nbytes
    st.has_memory[d] = True
    st.receives_at[d, layer] = True
