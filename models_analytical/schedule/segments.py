"""Sub-models (segments): each device's work cut as :mod:`dse.runtime.compile.partition` cuts it,
before a step that receives, after a gather and after a send's deadline, and what each costs on
its device beyond its layers: a run (``segment_run_s``) and per byte of each tensor it takes in
and gives out (``segment_in_per_byte_s``, ``segment_out_per_byte_s``)."""

from __future__ import annotations

import numpy as np

from dse.net.window import needed
from models_analytical.schedule.compiled import stage
from models_analytical.schedule.parts import inputs_end
from models_analytical.schedule.timeline import charge


@stage
def enter_segment(k_in, owner, st, layer, d, n_here):
    """Puts d's part of ``layer`` (cut into ``n_here`` parts; whole or channels, not a band:
    :func:`enter_band_segment`) in a sub-model: a new one after a cut or where it receives,
    else d's current one. Returns the seconds (before the host slowdown) of what that costs:
    the run of a new one, what enters it (received, gathered, or made by an earlier one here)
    and what leaves an earlier one here, per byte."""
    ty = k_in.device_type[d]
    seg, over = segment_of(k_in, st, layer, d)
    for e in range(k_in.in_ptr[layer], inputs_end(k_in, st, layer)):
        src = k_in.in_src[e]
        t = k_in.in_tensor[e]
        loc = k_in.entry if src < 0 else owner[src]
        whole = src >= 0 and st.part_count[st.row[src]] == 1
        if loc == d and whole and st.seg_of[d, src] == seg:
            continue  # made in this sub-model
        if st.taken_in[t, d] < 0 or st.seg_of[d, st.taken_in[t, d]] != seg:
            st.taken_in[t, d] = layer
            over += k_in.segment_in_per_byte_s[ty] * k_in.in_bytes[e]
        if loc == d and whole and not st.out_charged[src]:
            st.out_charged[src] = True  # it left an earlier sub-model here
            over += k_in.segment_out_per_byte_s[ty] * k_in.in_bytes[e]
    if n_here == 1 and k_in.is_output[layer] and not st.out_charged[layer]:
        st.out_charged[layer] = True
        over += k_in.segment_out_per_byte_s[ty] * k_in.out_bytes[layer]
    return over


@stage
def enter_band_segment(k_in, owner, st, layer, d):
    """:func:`enter_segment` for d's band of ``layer``: what enters its sub-model are the
    input rows the band reads (:func:`band_taken_in`). Apart, so that a mapping without bands
    runs (and compiles) none of it."""
    seg, over = segment_of(k_in, st, layer, d)
    return over + band_taken_in(k_in, owner, st, layer, d, seg)


@stage
def segment_of(k_in, st, layer, d):
    """The sub-model d's part of ``layer`` joins (a new one after a cut or where it receives,
    else d's current one) and the seconds its run costs if new (else 0)."""
    seg = st.seg_current[d]
    if seg < 0 or st.receives_at[d, layer]:
        st.seg_last[d] += 1
        seg = st.seg_last[d]
        st.seg_current[d] = seg
        st.seg_starts[d, layer] = True
        over = k_in.segment_run_s[k_in.device_type[d]]
    else:
        over = 0.0
    st.seg_of[d, layer] = seg
    st.part_list[d, st.parts[d]] = layer  # counted when it runs
    return seg, over


@stage
def band_rows(k_in, st, layer, d):
    """The input rows ``(lo, hi)`` d's band of ``layer`` reads (:func:`dse.net.window.needed`)."""
    return needed(
        st.band_lo[layer, d],
        st.band_hi[layer, d],
        k_in.row_stride[layer],
        k_in.row_span[layer],
        k_in.row_pad[layer],
        k_in.in_rows[layer],
        k_in.row_transposed[layer],
    )


@stage
def band_taken_in(k_in, owner, st, layer, d, seg):
    """What d's band of ``layer`` takes into its sub-model ``seg``, per byte: the input rows it
    reads of each input, unless they were made in ``seg`` on d (its own band of the layer
    before, or a tensor d made whole there) and nothing was received for it."""
    lo, hi = band_rows(k_in, st, layer, d)
    cost = 0.0
    for e in range(k_in.in_ptr[layer], k_in.in_ptr[layer + 1]):
        src = k_in.in_src[e]
        here = src >= 0 and st.seg_of[d, src] == seg and not st.receives_at[d, layer]
        if here and (st.root[src] >= 0 or (owner[src] == d and st.part_count[st.row[src]] == 1)):
            continue
        nbytes = k_in.in_bytes[e] * (hi - lo) / max(k_in.in_rows[layer], 1)
        cost += k_in.segment_in_per_byte_s[k_in.device_type[d]] * nbytes
    return cost


@stage
def send_deadline(k_in, owner, st, loc, src, layer):
    """The last layer after which ``loc`` sends ``src``'s output to the device computing
    ``layer`` (its first reader there): the latest input of ``layer`` that ``loc`` makes whole
    in the same run of work as ``src`` (no receive or gather on ``loc`` between)."""
    dl = src
    for e in range(k_in.in_ptr[layer], inputs_end(k_in, st, layer)):
        s2 = k_in.in_src[e]
        if s2 <= dl or owner[s2] != loc or st.part_count[st.row[s2]] != 1:
            continue
        if same_run(st, loc, src, s2):
            dl = s2
    return dl


@stage
def same_run(st, loc, src, later):
    """Whether ``loc`` computes layers ``src`` and ``later`` in one run of work: no receive
    for a layer after ``src`` up to ``later``, nor a gather after one before ``later``."""
    for m in range(src + 1, later + 1):
        if st.receives_at[loc, m] or (m < later and st.gathers_at[loc, m]):
            return False
    return True


@stage
def end_after_send(k_in, owner, st, loc, dl):
    """``loc``'s sub-model ends after layer ``dl``, a send's deadline: it closes there if
    ``loc`` has run nothing after ``dl``; else the parts it ran after ``dl`` become a sub-model
    of their own, charged on ``loc`` (:func:`cut_after`)."""
    n = st.parts[loc]
    if n == 0 or dl >= st.part_list[loc, n - 1]:
        st.ends_at[loc, dl] = True
        st.seg_current[loc] = -1
    else:  # found late: loc ran on in that sub-model
        late = cut_after(k_in, owner, st, loc, dl)
        late *= st.slowdown[loc]
        charge(k_in, st, loc, late)


@stage
def cut_after(k_in, owner, st, d, layer):
    """The runtime ends device d's sub-model after ``layer``, a send's deadline found only
    now: d already ran parts after it in the same sub-model. Those become one of their own,
    whose run and the tensors that now cross into it are charged; returns those seconds
    (before the host slowdown). (A cut at d's last part only closes it.)"""
    st.ends_at[d, layer] = True
    n = st.parts[d]
    first = np.searchsorted(st.part_list[d, :n], layer, side="right")  # d's first part after
    y = st.part_list[d, first]
    if st.seg_starts[d, y]:
        return 0.0
    st.seg_starts[d, y] = True
    ty = k_in.device_type[d]
    old = st.seg_of[d, y]
    st.seg_last[d] += 1
    new = st.seg_last[d]
    if st.seg_current[d] == old:
        st.seg_current[d] = new
    cost = k_in.segment_run_s[ty]
    for j in range(first, n):
        z = st.part_list[d, j]
        if st.seg_of[d, z] != old:
            break  # a sub-model's parts are consecutive
        st.seg_of[d, z] = new
        if st.row[z] != z:
            continue  # it reads the part made before it here
        for e in range(k_in.in_ptr[z], k_in.in_ptr[z + 1]):
            src = k_in.in_src[e]
            t = k_in.in_tensor[e]
            whole = src >= 0 and owner[src] == d and st.part_count[st.row[src]] == 1
            if whole and st.seg_of[d, src] == new:
                continue  # made in the new one
            ta = st.taken_in[t, d]
            if ta >= 0 and st.seg_of[d, ta] == new:
                continue  # taken in by the new one (its charge moves with it)
            # a later sub-model took it in last, so taken_in cannot mark the new one: did one
            # of the new one's parts before this one take it in?
            later = ta >= 0 and st.seg_of[d, ta] != old
            if later and reads(k_in, st, t, d, new, first, j):
                continue
            if whole and st.seg_of[d, src] == old:  # made before the cut: it crosses it now
                charged = True
                if not st.out_charged[src]:
                    st.out_charged[src] = True
                    cost += k_in.segment_out_per_byte_s[ty] * k_in.in_bytes[e]
            elif later:  # charged once for the old one: did its first half take it in too?
                # stop an int64, not the literal -1: one compiled reads, not two
                charged = reads(k_in, st, t, d, old, first, np.int64(-1))
            else:
                charged = True  # taken in before the cut: the new one takes it in too
            if charged:
                cost += k_in.segment_in_per_byte_s[ty] * k_in.in_bytes[e]
            if not later:
                st.taken_in[t, d] = z
    return cost


@stage
def reads(k_in, st, t, d, seg, start, stop):
    """Whether a part of device d in sub-model ``seg`` reads tensor t: its parts from index
    ``start`` back while they are in ``seg`` (``stop`` -1), or those in [start, stop)."""
    j = start - 1 if stop < 0 else start
    while (j >= 0 if stop < 0 else j < stop) and st.seg_of[d, st.part_list[d, j]] == seg:
        z = st.part_list[d, j]
        if st.row[z] == z:
            for e in range(k_in.in_ptr[z], k_in.in_ptr[z + 1]):
                if k_in.in_tensor[e] == t:
                    return True
        j = j - 1 if stop < 0 else j + 1
    return False


@stage
def count_segments(share, st):
    """Each device's sub-models: one starts at its first part, and again at a part after a
    cut (a send's deadline or a gather) or at one that receives; and the slicers (rows of a
    tensor cut for another device's band, where no computation of its made the tensor)."""
    n_layers, n_dev = share.shape
    for d in range(n_dev):
        st.segments[d] += st.slicers[d]
        if st.parts[d] == 0:
            continue
        cut = True
        rows = st.rows_on[0]
        for i in range(n_layers):
            if rows and st.root[i] >= 0:
                here = st.band_hi[i, d] > st.band_lo[i, d]
            else:
                here = share[st.row[i], d] > 0.0
            if here:
                if cut or st.receives_at[d, i]:
                    st.segments[d] += 1
                cut = False
            if st.ends_at[d, i]:
                cut = True
