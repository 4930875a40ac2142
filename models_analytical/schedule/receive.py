"""A part's inputs: each reaches the part's device once, sent by the device holding it whole
(its owner, or the entry device for the input image) with its deadline, ending the sender's
sub-model there."""

from __future__ import annotations

from models_analytical.schedule.compiled import stage
from models_analytical.schedule.memory import hold
from models_analytical.schedule.parts import inputs_end
from models_analytical.schedule.segments import end_after_send, send_deadline
from models_analytical.schedule.timeline import charge, transfer


@stage
def held_whole(k_in, owner, st, e, src, t):
    """Where input ``e`` (tensor t, ``src``'s output; -1: the image) is held whole and when it
    is ready there: the image on the entry device, kept there from the start; else on
    ``src``'s owner."""
    if src < 0:
        loc = k_in.entry
        st.kept[t, loc] = True
        st.tensor_bytes[t] = k_in.in_bytes[e]
        st.has_memory[loc] = True
        return loc, 0.0
    return owner[src], st.ready[src]


@stage
def receive_inputs(k_in, owner, st, layer, d):
    """When every input of d's part of ``layer`` is on d: made there, already received, or
    received now (:func:`receive`). A part of a layer on another's parts reads the part made
    before on its device and receives nothing."""
    t_in = 0.0
    for e in range(k_in.in_ptr[layer], inputs_end(k_in, st, layer)):
        src = k_in.in_src[e]
        t = k_in.in_tensor[e]
        loc, rdy = held_whole(k_in, owner, st, e, src, t)
        if loc == d:
            a = rdy
        else:
            a = st.arrival[t, d]
            if a < 0.0:
                a = receive(k_in, owner, st, layer, e, loc, d, rdy)
        if a > t_in:
            t_in = a
    return t_in


@stage
def receive(k_in, owner, st, layer, e, loc, d, rdy):
    """Input edge ``e`` of ``layer`` crosses from ``loc`` (where it is ready at ``rdy``) to d,
    which keeps it in a buffer for good; returns when it is in. A whole output is sent after
    its deadline (:func:`~models_analytical.schedule.segments.send_deadline`), and leaves its
    sub-model on ``loc`` (charged there once); ``loc``'s sub-model ends at the deadline and a
    whole output it sends is held there until the end of the inference (sends complete
    there)."""
    src = k_in.in_src[e]
    t = k_in.in_tensor[e]
    nbytes = k_in.in_bytes[e]
    dl = src
    if src >= 0 and st.part_count[st.row[src]] == 1:
        # sent with the last input of this layer that loc makes later in the same run of work
        dl = send_deadline(k_in, owner, st, loc, src, layer)
        rdy = st.ready[dl]
        if not st.out_charged[src]:  # it leaves its sub-model on loc
            st.out_charged[src] = True
            c_out = k_in.segment_out_per_byte_s[k_in.device_type[loc]] * nbytes * st.slowdown[loc]
            rdy += c_out
            charge(k_in, st, loc, c_out)
    a = transfer(k_in, st, loc, d, nbytes, rdy)
    st.arrival[t, d] = a
    st.kept[t, d] = True
    st.tensor_bytes[t] = nbytes
    st.has_memory[d] = True
    st.receives_at[d, layer] = True
    if src >= 0 and not st.ends_at[loc, dl]:
        end_after_send(k_in, owner, st, loc, dl)
        if st.part_count[st.row[src]] == 1 and not st.sent_whole[t]:
            # a whole output sent on: held to the end of the inference
            st.sent_whole[t] = True
            hold(st, loc, k_in.last_use[src] + 1, k_in.out_bytes.size, nbytes)
    return a
