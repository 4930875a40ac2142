"""Time taken on devices and links: a transfer queued on its link, seconds of work charged to a
device. Both also add to the device's figures (busy, communication, bytes sent, energy)."""

from __future__ import annotations

from models_analytical.schedule.compiled import stage
from models_analytical.schedule.costs import transfer_s


@stage
def transfer(k_in, st, a, b, nbytes, ready):
    """Moves ``nbytes`` from device a, where they are ready at ``ready``, to b; returns when
    they are in. The transfer waits for both its queues (FIFOs: the sender's side and the
    receiver's, one and the same but between boards of a switched network) and, where
    receiving occupies the device (``receive_on_device``), for b to be free; it keeps them
    (and b) busy until it is in."""
    q_send = k_in.queue_send[a, b]
    q_recv = k_in.queue_recv[a, b]
    on_device = k_in.receive_on_device[k_in.device_type[b]]
    start = max(ready, st.link_free[q_send], st.link_free[q_recv])
    if on_device:
        start = max(start, st.dev_free[b])
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
    st.dev_free[d] += seconds
    st.busy[d] += seconds
    st.energy[d] += seconds * k_in.overhead_power_w[k_in.device_type[d]]
