"""Time taken on devices and links: a transfer queued on its link, seconds of work charged to a
device. Both also add to the device's figures (busy, communication, bytes sent, energy)."""

from __future__ import annotations

from models_analytical.schedule.compiled import stage
from models_analytical.schedule.costs import transfer_s


@stage
def begin(st, d, start):
    """A step of device d (work, a send, a receive that occupies it) starts at ``start``: the
    first of the inference sets its ``first_start`` (the device's span,
    kernel.ScheduleResult.span_s, runs from there)."""
    if st.first_start[d] < 0.0:
        st.first_start[d] = start


@stage
def transfer(k_in, st, a, b, nbytes, ready):
    """Moves ``nbytes`` from device a, where they are ready at ``ready``, to b; returns when
    they are in. The transfer waits for both its queues (FIFOs: the sender's side and the
    receiver's, one and the same but between boards of a switched network) and, where
    receiving occupies the device (``receive_on_device``), for b to be free; it keeps them
    (and b) busy until it is in. Sending is a step of a's (the entry device's first may be
    sending the image)."""
    begin(st, a, ready)
    q_send = k_in.queue_send[a, b]
    q_recv = k_in.queue_recv[a, b]
    on_device = k_in.receive_on_device[k_in.device_type[b]]
    start = max(ready, st.link_free[q_send], st.link_free[q_recv])
    if on_device:
        start = max(start, st.dev_free[b])
        begin(st, b, start)
    dur = transfer_s(k_in, a, b, nbytes)
    arrival = start + dur
    st.link_free[q_send] = arrival
    st.link_free[q_recv] = arrival
    if on_device:
        st.dev_free[b] = arrival
    st.comm[a] += dur
    st.comm[b] += dur
    st.bytes_sent[a] += nbytes
    st.energy[a] += nbytes * k_in.link_j_per_byte[a, b]
    st.energy[b] += nbytes * k_in.link_j_per_byte[a, b]
    return arrival


@stage
def charge(k_in, st, d, seconds):
    """``seconds`` of overhead on device d after its work so far (a sub-model's cost)."""
    begin(st, d, st.dev_free[d])
    st.dev_free[d] += seconds
    st.busy[d] += seconds
    st.energy[d] += seconds * k_in.overhead_power_w[k_in.device_type[d]]


@stage
def compute(k_in, st, layer, d, work, over, t_in):
    """A part or band of ``layer`` on device d, once d is free and its inputs are in (at
    ``t_in``): ``work`` seconds of its share of the layer, the layer's fixed per-part cost and
    ``over`` (its sub-model's costs), all slower by d's host slowdown; ends when they are done."""
    ty = k_in.device_type[d]
    slow = st.slowdown[d]
    work *= slow
    fixed = k_in.t_fixed[ty, layer] * slow
    over *= slow
    start = max(st.dev_free[d], t_in)
    begin(st, d, start)
    end = start + over + work + fixed
    st.dev_free[d] = end
    st.part_end[d] = end
    st.busy[d] += over + work + fixed
    st.parts[d] += 1
    st.energy[d] += work * k_in.power_w[ty, k_in.op_class[layer]]
    st.energy[d] += (fixed + over) * k_in.overhead_power_w[ty]
