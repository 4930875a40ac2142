"""The event-driven schedule of one inference, compiled with numba, over a batch of mappings.

Per mapping, layers are visited in the graph's topological order. Every device runs its parts
in that order (a FIFO per device); a part starts when its device is free and all its inputs
have arrived; a transfer starts when its tensor is ready and its link (a FIFO per channel) is
free, and takes latency + bytes / bandwidth. A tensor crosses to a given device once. A split
layer needs its whole input on every part's device. Its parts are gathered (all-gather): a
device that computed a part and needs the whole output (it computes a consumer, or a part of
one) receives the other parts straight from the devices that computed them and concatenates
locally; the owner receives every other part and concatenates when it needs the whole (it
computes a consumer or holds a graph output) or must forward it to a device that computed no
part (Eq. 4.3 when the parts' devices do not read the output); no one else gets parts. Each
concatenation costs the layer's per-part overhead on its device. A channel-local layer that
follows a split layer (``follows``: Relu, pooling, BatchNormalization) runs on that layer's
parts with its shares, each part reading the part made on its device; its output is gathered
instead of the split layer's, by the same rule, to its own device as owner. Memory follows
allocate-then-free liveness per device over the same order (seed 002), as the runtime
(:mod:`dse.runtime.worker`) holds tensors: an output is held from the step that makes it to
its last reader there, or to the end of the inference if the device sends it (sends complete
there); what a device receives or gathers lands in buffers allocated once and kept, as does
the input image where it enters: those are ``held`` bytes, apart from the peak.

Each device's work runs as sub-models, cut as :mod:`dse.runtime.partition` cuts them (before a
step that receives, after a gather and after a send's deadline). Each costs on its device, on
top of its layers, a run (``seg_run``) and per byte of each tensor it takes in and gives out
(``seg_in``, ``seg_out``: layout conversions and copies at its edges). Where receiving
occupies the device (``recv_busy``: the runtime's ranks copy data in with a blocking receive),
a transfer starts no earlier than the receiver is free and keeps it busy until it is in.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from dse.mapping.rules import dense_one


class KernelInputs(NamedTuple):
    """Everything the kernel reads besides the mappings: built once per (graph, platform,
    coefficients) by the model, read by field name in compiled code (a numba namedtuple)."""

    kind: np.ndarray  # int64 [D] index into KINDS
    t_work: np.ndarray  # [K, L] seconds to compute a whole layer (scales with its share)
    t_fixed: np.ndarray  # [K, L] seconds per part regardless of share
    op_class: np.ndarray  # int64 [L] index into OP_CLASSES
    out_bytes: np.ndarray  # float64 [L]
    w_bytes: np.ndarray  # float64 [L]
    in_ptr: np.ndarray  # int64 [L+1] CSR of each layer's inputs
    in_src: np.ndarray  # int64 [E] producing layer, -1 for a graph input
    in_tensor: np.ndarray  # int64 [E] tensor id
    in_bytes: np.ndarray  # float64 [E]
    last_use: np.ndarray  # int64 [L] last layer reading each output (L-1 for graph outputs)
    entry: int  # device where the input image enters
    lat: np.ndarray  # [D, D] link latency, s
    inv_bw: np.ndarray  # [D, D] s per byte
    e_byte: np.ndarray  # [D, D] J per byte
    channel: np.ndarray  # int64 [D, D] link queue id
    n_channels: int
    streamed: bool  # weights held only while their layer runs
    p_class: np.ndarray  # [K, op classes] W while computing
    p_overhead: np.ndarray  # [K] W during per-layer overhead
    block: np.ndarray  # [K, L] a split conv's part computes whole blocks of this many channels
    channels: np.ndarray  # float64 [L] output channels
    lk_class: np.ndarray  # int64 [D, D] measured link table of each pair, -1: latency + bw
    lk_bytes: np.ndarray  # [C, G] message sizes of each table (increasing)
    lk_sec: np.ndarray  # [C, G] transfer time at those sizes
    seg_fixed: np.ndarray  # [K] cost of a tensor crossing to a device of this kind (the cut
    seg_byte: np.ndarray  # [K] segments on both ends), fixed and per byte
    split_slow: np.ndarray  # [K] work factor of a split layer's parts (they run side by side)
    part_fixed: np.ndarray  # [K, L] share of the whole layer's time every part of it pays
    host: np.ndarray  # int64 [D] index of each device's host
    shared_slow: np.ndarray  # [K] work factor while another device of the host has work too
    seg_run: np.ndarray  # [K] seconds per sub-model run, on the device (session call, setup)
    seg_in: np.ndarray  # [K] seconds per byte of each tensor a sub-model takes in (layout
    seg_out: np.ndarray  # [K] conversion, copies) and of each it gives out
    recv_busy: np.ndarray  # bool [K] a transfer occupies a receiving device of this kind: its
    # rank copies the data in (MPI Recv) once it has finished its work before, not meanwhile
    out_ptr: np.ndarray  # int64 [L+1] CSR of each layer's consumer layers
    out_dst: np.ndarray  # int64 [E'] consumer layer
    out_tid: np.ndarray  # int64 [L] tensor id of each layer's output (-1: nobody reads it)
    is_output: np.ndarray  # bool [L] the layer makes a graph output
    follows: np.ndarray  # int64 [L] the split layer whose parts this layer continues, or -1
    follower: np.ndarray  # int64 [L] the layer that follows this one, or -1


@njit(cache=True, nogil=True)
def _transfer_s(k_in, a, b, nbytes):
    """Seconds to move ``nbytes`` from device a to b: the link (its measured table, linear
    between points and beyond the last, or latency + bytes / bandwidth) plus the cost of
    cutting the work into segments on both ends (charged by the receiver's kind)."""
    c = k_in.lk_class[a, b]
    if c >= 0:
        xs = k_in.lk_bytes[c]
        ys = k_in.lk_sec[c]
        i = np.searchsorted(xs, nbytes)
        i = min(max(i, 1), xs.size - 1)
        t = ys[i - 1] + (nbytes - xs[i - 1]) * (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
        t = max(t, ys[0])
    else:
        t = k_in.lat[a, b] + nbytes * k_in.inv_bw[a, b]
    kb = k_in.kind[b]
    return t + k_in.seg_fixed[kb] + nbytes * k_in.seg_byte[kb]


@njit(cache=True, nogil=True)
def part_share(k_in, k, layer, s, n_here):
    """The share of a layer's work a part of share ``s`` costs on kind ``k``. Split, a part
    pays the layer's fixed share ``f`` (``part_fixed``: its input's transform, whatever its
    channels) and the rest for its whole channel blocks, ``f + (1 - f) x blocks``, slower by
    ``split_slow`` (parts of one layer run at the same time on the devices of a host, which
    share its memory bandwidth and caches)."""
    if n_here < 2:
        return s
    b = k_in.block[k, layer]
    if b <= 1.0:
        blocks = s
    else:
        c = k_in.channels[layer]
        blocks = min(np.ceil(s * c / b - 1e-9) * b / c, 1.0)
    f = k_in.part_fixed[k, layer]
    return (f + (1.0 - f) * blocks) * k_in.split_slow[k]


@njit(cache=True, nogil=True)
def _deadline(loc, src, layer, absorbed, k_in, recv_at, gath_at, pcnt, row, owner):
    """The last layer after which ``loc`` sends ``src``'s output to the device computing
    ``layer`` (its first reader there): the latest input of ``layer`` that ``loc`` makes whole
    in the same run of work as ``src`` (no receive or gather on ``loc`` between)."""
    dl = src
    hi = k_in.in_ptr[layer] if absorbed else k_in.in_ptr[layer + 1]
    for e in range(k_in.in_ptr[layer], hi):
        s2 = k_in.in_src[e]
        if s2 <= dl or owner[s2] != loc or pcnt[row[s2]] != 1:
            continue
        same_run = True
        for m in range(src + 1, s2 + 1):
            if recv_at[loc, m] or (m < s2 and gath_at[loc, m]):
                same_run = False
                break
        if same_run:
            dl = s2
    return dl


@njit(cache=True, nogil=True)
def _cut_after(
    d, layer, k_in, row, pcnt, owner, sub, seg_start, lseg, plist, n_parts, sent_at, in_at, done
):
    """The runtime ends device d's sub-model after ``layer``, a send's deadline found only
    now: d already ran parts after it in the same sub-model. Those become one of their own
    (``sub`` row 0: each device's current sub-model, row 1: the last number given;
    ``plist[d, :n_parts[d]]`` d's parts so far), whose run and the tensors that now cross
    into it are charged; returns those seconds. (A cut at d's last part only closes it.)"""
    sent_at[d, layer] = True
    n = n_parts[d]
    first = np.searchsorted(plist[d, :n], layer, side="right")  # d's first part after it
    y = plist[d, first]
    if seg_start[d, y]:
        return 0.0
    seg_start[d, y] = True
    k = k_in.kind[d]
    old = lseg[d, y]
    sub[1, d] += 1
    new = sub[1, d]
    if sub[0, d] == old:
        sub[0, d] = new
    cost = k_in.seg_run[k]
    for j in range(first, n):
        z = plist[d, j]
        if lseg[d, z] != old:
            break  # a sub-model's parts are consecutive
        lseg[d, z] = new
        if row[z] != z:
            continue  # it reads the part made before it here
        for e in range(k_in.in_ptr[z], k_in.in_ptr[z + 1]):
            src = k_in.in_src[e]
            t = k_in.in_tensor[e]
            whole = src >= 0 and owner[src] == d and pcnt[row[src]] == 1
            if whole and lseg[d, src] == new:
                continue  # made in the new one
            ta = in_at[t, d]
            if ta >= 0 and lseg[d, ta] == new:
                continue  # taken in by the new one (its charge moves with it)
            # a later sub-model took it in last, so in_at cannot mark the new one: did one of
            # the new one's parts before this one take it in?
            later = ta >= 0 and lseg[d, ta] != old
            if later and _reads(t, d, new, first, j, plist, k_in, row, lseg):
                continue
            if whole and lseg[d, src] == old:  # made before the cut: it crosses it now
                charge = True
                if not done[src]:
                    done[src] = True
                    cost += k_in.seg_out[k] * k_in.in_bytes[e]
            elif later:  # charged once for the old one: did its first half take it in too?
                charge = _reads(t, d, old, first, -1, plist, k_in, row, lseg)
            else:
                charge = True  # taken in before the cut: the new one takes it in too
            if charge:
                cost += k_in.seg_in[k] * k_in.in_bytes[e]
            if not later:
                in_at[t, d] = z
    return cost


@njit(cache=True, nogil=True)
def _reads(t, d, seg, start, stop, plist, k_in, row, lseg):
    """Whether a part of device d in sub-model ``seg`` reads tensor t: its parts from index
    ``start`` back while they are in ``seg`` (``stop`` -1), or those in [start, stop)."""
    j = start - 1 if stop < 0 else start
    while (j >= 0 if stop < 0 else j < stop) and lseg[d, plist[d, j]] == seg:
        z = plist[d, j]
        if row[z] == z:
            for e in range(k_in.in_ptr[z], k_in.in_ptr[z + 1]):
                if k_in.in_tensor[e] == t:
                    return True
        j = j - 1 if stop < 0 else j + 1
    return False


@njit(cache=True, nogil=True)
def _simulate_one(
    share,
    owner,
    k_in,
    latency_out,
    busy,
    comm,
    mem_peak,
    energy,
    n_parts,
    sent,
    n_segs,
    held,
):
    kind, t_work, t_fixed, op_class = k_in.kind, k_in.t_work, k_in.t_fixed, k_in.op_class
    out_bytes, w_bytes, last_use, entry = k_in.out_bytes, k_in.w_bytes, k_in.last_use, k_in.entry
    in_ptr, in_src, in_tensor, in_bytes = k_in.in_ptr, k_in.in_src, k_in.in_tensor, k_in.in_bytes
    e_byte, channel = k_in.e_byte, k_in.channel
    n_channels, streamed = k_in.n_channels, k_in.streamed
    p_class, p_overhead = k_in.p_class, k_in.p_overhead
    n_layers, n_dev = share.shape
    n_tensors = in_tensor.max() + 1 if in_tensor.size else 0
    ready = np.zeros(n_layers)
    dev_free = np.zeros(n_dev)
    link_free = np.zeros(n_channels)
    arrival = np.full((n_tensors, n_dev), -1.0)
    kept = np.zeros((n_tensors, n_dev), dtype=np.bool_)  # a buffer of tensor t kept on d
    recv_bytes = np.zeros(n_tensors)
    sent_whole = np.zeros(n_tensors, dtype=np.bool_)
    delta = np.zeros((n_dev, n_layers + 1))
    part_end = np.zeros(n_dev)
    gather_in = np.zeros(n_dev)
    # the runtime cuts a device's work into segments (sub-models) before a step that receives,
    # after a gather and after a send's deadline (dse.runtime.partition.send_deadlines):
    # recv_at[d, l] / sent_at[d, l] mark those; gath_at[d, l]: d gathers layer l
    recv_at = np.zeros((n_dev, n_layers), dtype=np.bool_)
    sent_at = np.zeros((n_dev, n_layers), dtype=np.bool_)
    gath_at = np.zeros((n_dev, n_layers), dtype=np.bool_)
    # need[d]: device d reads the split layer's whole output (it computes a consumer or a part
    # of one, or holds it as a graph output); filled for split layers only
    need = np.zeros(n_dev, dtype=np.bool_)
    out_ptr, out_dst, out_tid = k_in.out_ptr, k_in.out_dst, k_in.out_tid
    follows, follower = k_in.follows, k_in.follower
    # row[l]: the layer whose shares l runs with: its own, or (a channel-local layer after a
    # split one) the split layer's; absorbed: l reads its input part by part on each device.
    # pdev[r, :pcnt[r]]: the devices of row r's parts, in index order
    row = np.empty(n_layers, dtype=np.int64)
    pcnt = np.zeros(n_layers, dtype=np.int64)
    pdev = np.empty((n_layers, n_dev), dtype=np.int64)
    works = np.zeros(n_dev, dtype=np.bool_)  # devices some part runs on
    for layer in range(n_layers):
        row[layer] = layer
        f = follows[layer]
        if f >= 0 and pcnt[row[f]] > 1:
            row[layer] = row[f]
            continue
        cnt = 0
        for d in range(n_dev):
            if share[layer, d] > 0.0:
                pdev[layer, cnt] = d
                works[d] = True
                cnt += 1
        pcnt[layer] = cnt
    # a device's work (layers, its sub-models' costs) runs slower by shared_slow where another
    # device of its host computes in this mapping too (they share its caches and memory
    # bandwidth; a waiting rank polls); a layer running on another's parts (absorbed) counts
    # by those parts' devices, not its own shares
    host = k_in.host
    on_host = np.zeros(n_dev, dtype=np.int64)
    for d in range(n_dev):
        if works[d]:
            on_host[host[d]] += 1
    slow = np.ones(n_dev)
    for d in range(n_dev):
        if on_host[host[d]] > 1:
            slow[d] = k_in.shared_slow[kind[d]]
    # sub-models as they run (see _cut_after): the current one on each device (sub[0], -1 when
    # a send's deadline or a gather has closed it; sub[1] numbers them), lseg[d, l] the one d's part
    # of layer l ran in, seg_start[d, l] marks a part that starts one; in_at[t, d] the part
    # (layer) that last took tensor t into its sub-model on d (charged; lseg gives the one);
    # out_done[l]: layer l's whole output was charged as leaving its sub-model
    seg_run, seg_in, seg_out = k_in.seg_run, k_in.seg_in, k_in.seg_out
    sub = np.full((2, n_dev), -1, dtype=np.int64)
    lseg = np.full((n_dev, n_layers), -1, dtype=np.int64)
    seg_start = np.zeros((n_dev, n_layers), dtype=np.bool_)
    plist = np.empty((n_dev, n_layers), dtype=np.int64)  # each device's parts, in order
    in_at = np.full((n_tensors, n_dev), -1, dtype=np.int64)
    out_done = np.zeros(n_layers, dtype=np.bool_)
    gatherers = np.empty(n_dev, dtype=np.int64)
    touched = np.zeros(n_dev, dtype=np.bool_)  # devices whose memory deltas are not all zero
    finish = 0.0
    for layer in range(n_layers):
        r = row[layer]
        absorbed = r != layer
        nxt = follower[layer]
        continued = nxt >= 0 and row[nxt] != nxt  # its parts go on to the follower's parts
        n_here = pcnt[r]
        for i in range(n_here):
            d = pdev[r, i]
            s = share[r, d]
            t_in = 0.0
            # absorbed: its one input is the part made before on this device (FIFO)
            hi = in_ptr[layer] if absorbed else in_ptr[layer + 1]
            for e in range(in_ptr[layer], hi):
                src = in_src[e]
                t = in_tensor[e]
                if src < 0:
                    loc = entry
                    rdy = 0.0
                    # the input image is kept where it enters
                    kept[t, entry] = True
                    recv_bytes[t] = in_bytes[e]
                    touched[entry] = True
                else:
                    loc = owner[src]
                    rdy = ready[src]
                if loc == d:
                    a = rdy
                else:
                    a = arrival[t, d]
                    if a < 0.0:
                        dl = src
                        if src >= 0 and pcnt[row[src]] == 1:
                            # sent with the last input of this layer that loc makes later
                            # in the same run of work (no receive or gather between)
                            dl = _deadline(
                                loc, src, layer, absorbed, k_in, recv_at, gath_at, pcnt, row, owner
                            )
                            rdy = ready[dl]
                            if not out_done[src]:  # it leaves its sub-model on loc
                                out_done[src] = True
                                c_out = seg_out[kind[loc]] * in_bytes[e] * slow[loc]
                                rdy += c_out
                                dev_free[loc] += c_out
                                busy[loc] += c_out
                                energy[loc] += c_out * p_overhead[kind[loc]]
                        ch = channel[loc, d]
                        start = max(rdy, link_free[ch])
                        if k_in.recv_busy[kind[d]]:
                            start = max(start, dev_free[d])
                        dur = _transfer_s(k_in, loc, d, in_bytes[e])
                        a = start + dur
                        link_free[ch] = a
                        if k_in.recv_busy[kind[d]]:
                            dev_free[d] = a
                        arrival[t, d] = a
                        comm[loc] += dur
                        comm[d] += dur
                        sent[loc] += in_bytes[e]
                        energy[loc] += in_bytes[e] * e_byte[loc, d]
                        energy[d] += in_bytes[e] * e_byte[loc, d]
                        kept[t, d] = True
                        recv_bytes[t] = in_bytes[e]
                        recv_at[d, layer] = True
                        touched[d] = True
                        if src >= 0 and not sent_at[loc, dl]:
                            if n_parts[loc] == 0 or dl >= plist[loc, n_parts[loc] - 1]:
                                sent_at[loc, dl] = True  # loc's sub-model ends here
                                sub[0, loc] = -1
                            else:  # found late: loc ran on in that sub-model
                                late = _cut_after(
                                    loc, dl, k_in, row, pcnt, owner, sub, seg_start, lseg,
                                    plist, n_parts, sent_at, in_at, out_done,
                                )  # fmt: skip
                                late *= slow[loc]
                                dev_free[loc] += late
                                busy[loc] += late
                                energy[loc] += late * p_overhead[kind[loc]]
                            if pcnt[row[src]] == 1 and not sent_whole[t]:
                                # a whole output sent on: held to the end of the inference
                                sent_whole[t] = True
                                delta[loc, last_use[src] + 1] += in_bytes[e]
                                delta[loc, n_layers] -= in_bytes[e]
                if a > t_in:
                    t_in = a
            k = kind[d]
            # the sub-model this part runs in: a new one after a cut or where it receives; what
            # enters it (received, gathered, or made by an earlier one here) and what leaves it
            # costs per byte on this device
            seg = sub[0, d]
            if seg < 0 or recv_at[d, layer]:
                sub[1, d] += 1
                seg = sub[1, d]
                sub[0, d] = seg
                seg_start[d, layer] = True
                over = seg_run[k]
            else:
                over = 0.0
            lseg[d, layer] = seg
            plist[d, n_parts[d]] = layer  # n_parts[d] counts it below
            for e in range(in_ptr[layer], hi):
                src = in_src[e]
                t = in_tensor[e]
                loc = entry if src < 0 else owner[src]
                whole = src >= 0 and pcnt[row[src]] == 1
                if loc == d and whole and lseg[d, src] == seg:
                    continue  # made in this sub-model
                if in_at[t, d] < 0 or lseg[d, in_at[t, d]] != seg:
                    in_at[t, d] = layer
                    over += seg_in[k] * in_bytes[e]
                if loc == d and whole and not out_done[src]:
                    out_done[src] = True  # it left an earlier sub-model here
                    over += seg_out[k] * in_bytes[e]
            if n_here == 1 and k_in.is_output[layer] and not out_done[layer]:
                out_done[layer] = True
                over += seg_out[k] * out_bytes[layer]
            work = part_share(k_in, k, layer, s, n_here) * t_work[k, layer] * slow[d]
            fixed = t_fixed[k, layer] * slow[d]
            over *= slow[d]
            start = max(dev_free[d], t_in)
            end = start + over + work + fixed
            dev_free[d] = end
            part_end[d] = end
            busy[d] += over + work + fixed
            n_parts[d] += 1
            energy[d] += work * p_class[k, op_class[layer]]
            energy[d] += (fixed + over) * p_overhead[k]
            # weights of this part: held for its step (streamed) or the whole run (resident)
            wb = s * w_bytes[layer]
            touched[d] = True
            if streamed:
                delta[d, layer] += wb
                delta[d, layer + 1] -= wb
            else:
                delta[d, 0] += wb
                delta[d, n_layers] -= wb
        c = owner[layer]
        cat_owner = False
        if n_here == 1:
            ready[layer] = part_end[c]
        elif continued:  # each part is held on its device until the follower's part reads it
            for i in range(n_here):
                d = pdev[r, i]
                nbytes = share[r, d] * out_bytes[layer]
                delta[d, layer] += nbytes
                delta[d, nxt + 1] -= nbytes
        else:
            # all-gather: every part goes to each part device that needs the whole, and to the
            # owner when it concatenates (it needs the whole or forwards it to a device that
            # computed no part); each receiver concatenates locally. Each part leaves its
            # sub-model (to be sent, or gathered where it was made)
            for i in range(n_here):
                d = pdev[r, i]
                c_out = seg_out[kind[d]] * share[r, d] * out_bytes[layer] * slow[d]
                part_end[d] += c_out
                dev_free[d] += c_out
                busy[d] += c_out
                energy[d] += c_out * p_overhead[kind[d]]
            need[:] = False
            for j in range(out_ptr[layer], out_ptr[layer + 1]):
                m = row[out_dst[j]]
                for i in range(pcnt[m]):
                    need[pdev[m, i]] = True
            if k_in.is_output[layer]:
                need[c] = True
            cat_owner = need[c]
            n_need = 0
            for i in range(n_here):
                if need[pdev[r, i]]:
                    n_need += 1
            if not cat_owner:
                n_all = 0
                for d in range(n_dev):
                    if need[d]:
                        n_all += 1
                cat_owner = n_all > n_need  # a device without a part needs the whole
            # gatherers: the part devices that need the whole, and the owner if it concatenates
            n_g = 0
            owner_has_part = False
            last_part = 0.0
            for i in range(n_here):
                e = pdev[r, i]
                gather_in[e] = part_end[e]
                if part_end[e] > last_part:
                    last_part = part_end[e]
                if e == c:
                    owner_has_part = True
                if need[e] or (e == c and cat_owner):
                    gatherers[n_g] = e
                    n_g += 1
            if cat_owner and not owner_has_part:
                gather_in[c] = 0.0
                gatherers[n_g] = c
                n_g += 1
            for i in range(n_here):
                d = pdev[r, i]
                nbytes = share[r, d] * out_bytes[layer]
                sends = False
                for j in range(n_g):
                    e = gatherers[j]
                    if e == d:
                        continue
                    ch = channel[d, e]
                    start = max(part_end[d], link_free[ch])
                    if k_in.recv_busy[kind[e]]:
                        start = max(start, dev_free[e])
                    dur = _transfer_s(k_in, d, e, nbytes)
                    a = start + dur
                    link_free[ch] = a
                    if k_in.recv_busy[kind[e]]:
                        dev_free[e] = a
                    comm[d] += dur
                    comm[e] += dur
                    sent[d] += nbytes
                    energy[d] += nbytes * e_byte[d, e]
                    energy[e] += nbytes * e_byte[d, e]
                    if a > gather_in[e]:
                        gather_in[e] = a
                    sends = True
                if sends:  # the part is held on its device until its sends complete, at
                    # the end of the inference (dse.runtime.worker waits for them there)
                    sent_at[d, layer] = True  # d just ran this part: its sub-model ends
                    sub[0, d] = -1
                    delta[d, layer] += nbytes
                    delta[d, n_layers] -= nbytes
            ready[layer] = last_part  # nobody reads it from the owner unless it concatenates
            t = out_tid[layer]
            for j in range(n_g):
                e = gatherers[j]
                sent_at[e, layer] = True  # a gather step ends e's sub-model
                sub[0, e] = -1
                gath_at[e, layer] = True
                k = kind[e]
                start = max(dev_free[e], gather_in[e])
                cat = t_fixed[k, layer] * slow[e]
                end = start + cat
                dev_free[e] = end
                busy[e] += cat
                energy[e] += cat * p_overhead[k]
                if end > finish:
                    finish = end
                if e == c:
                    ready[layer] = end
                elif t >= 0:  # a gathered whole: held like a received tensor
                    arrival[t, e] = end
                    kept[t, e] = True
                    recv_bytes[t] = out_bytes[layer]
                    touched[e] = True
        if n_here == 1:
            # the owner holds the whole output until its last reader anywhere has it (until the
            # end of the inference if it sends it, below)
            delta[c, layer] += out_bytes[layer]
            delta[c, last_use[layer] + 1] -= out_bytes[layer]
            touched[c] = True
        elif cat_owner:  # the owner gathers into a buffer the runtime keeps for good
            held[c] += out_bytes[layer]
            touched[c] = True
        if ready[layer] > finish:
            finish = ready[layer]
    # receive and gather buffers, and the input image where it enters: allocated once by the
    # runtime and kept for good (``held``, apart from the peak of what comes and goes)
    for t in range(n_tensors):
        for d in range(n_dev):
            if kept[t, d]:
                held[d] += recv_bytes[t]
    for d in range(n_dev):
        if not touched[d]:
            continue
        acc = 0.0
        peak = 0.0
        for i in range(n_layers):
            acc += delta[d, i]
            if acc > peak:
                peak = acc
        mem_peak[d] = peak
        if n_parts[d] == 0:
            continue
        cut = True
        for i in range(n_layers):
            if share[row[i], d] > 0.0:
                if cut or recv_at[d, i]:
                    n_segs[d] += 1
                cut = False
            if sent_at[d, i]:
                cut = True
    latency_out[0] = finish


@njit(cache=True, nogil=True)
def _outputs(n_pop, n_dev):
    """The kernels' outputs, zeroed: latency [P]; busy, communication, peak bytes, energy,
    parts, bytes sent, segments and held bytes, each [P, D]."""
    return (
        np.zeros(n_pop),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev), dtype=np.int64),
        np.zeros((n_pop, n_dev)),
        np.zeros((n_pop, n_dev), dtype=np.int64),
        np.zeros((n_pop, n_dev)),
    )


@njit(cache=True, parallel=True)
def simulate(device, sizes, channels, consumer, producer, w_class, with_weights, k_in, n_chunks):
    """The schedule of every mapping (:class:`dse.mapping.Mappings`: ``device[P, L]``, -1 for
    splittable layers, and ``sizes[P, S, D]``); ``channels[L]`` the layers' output channels,
    ``consumer`` / ``producer`` [L] the graph's ``first_consumer`` / ``first_producer``. Each
    mapping's share [L, D] and owner [L] are built in per-thread scratch
    (:func:`dse.mapping.rules.dense_one`) and simulated by :func:`_simulate_one`.

    Returns latency [P]; busy, communication, activation+weight peak bytes, energy (without
    idle), parts, bytes sent, segments (the runtime's sub-models) and held bytes (buffers the
    runtime keeps for good: what a device receives or gathers, the input image where it
    enters; not in the peak), each [P, D]; and the weights each device holds by class,
    [P, D, C] = sum over layers of share x ``w_class[L, C]`` (zeros unless
    ``with_weights``). The mappings run in ``n_chunks`` contiguous chunks (a few per thread),
    each allocating its scratch once."""
    n_pop, n_layers = device.shape
    n_dev = sizes.shape[2]
    n_cls = w_class.shape[1]
    latency, busy, comm, mem, energy, parts, sent, segs, held = _outputs(n_pop, n_dev)
    weights = np.zeros((n_pop, n_dev, n_cls))
    n_chunks = max(min(n_chunks, n_pop), 1)
    for chunk in prange(n_chunks):
        lo = chunk * n_pop // n_chunks
        hi = (chunk + 1) * n_pop // n_chunks
        share = np.zeros((n_layers, n_dev))
        owner = np.empty(n_layers, dtype=np.int64)
        anchor = np.empty(n_layers, dtype=np.int64)
        for p in range(lo, hi):
            dense_one(device[p], sizes[p], channels, consumer, producer, share, owner, anchor)
            _simulate_one(
                share,
                owner,
                k_in,
                latency[p : p + 1],
                busy[p],
                comm[p],
                mem[p],
                energy[p],
                parts[p],
                sent[p],
                segs[p],
                held[p],
            )
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
    return latency, busy, comm, mem, energy, parts, sent, segs, held, weights


def input_csr(
    edge_src: np.ndarray,
    edge_dst: np.ndarray,
    edge_tensor: tuple[str, ...],
    edge_bytes: np.ndarray,
    n_layers: int,
) -> tuple[np.ndarray, ...]:
    """Per-layer input lists (CSR) with integer tensor ids."""
    order = np.argsort(edge_dst, kind="stable")
    ids: dict[str, int] = {}
    tensor = np.array([ids.setdefault(edge_tensor[i], len(ids)) for i in order], dtype=np.int64)
    ptr = np.zeros(n_layers + 1, dtype=np.int64)
    np.add.at(ptr, edge_dst[order] + 1, 1)
    return (
        np.cumsum(ptr),
        edge_src[order].astype(np.int64),
        tensor,
        edge_bytes[order].astype(np.float64),
    )
