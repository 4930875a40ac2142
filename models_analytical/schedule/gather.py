"""The all-gather of a layer split into parts: who receives the parts, their transfers, and the
concatenations. A device that computed a part and needs the whole output (it computes a
consumer, or a part of one) receives the other parts straight from the devices that computed
them; the owner receives every part it lacks when it needs the whole (a consumer, a graph
output) or must forward it to a device that computed no part (Eq. 4.3); no one else gets
parts. Each receiver concatenates locally, at the layer's per-part overhead."""

from __future__ import annotations

from models_analytical.schedule.compiled import stage
from models_analytical.schedule.memory import hold
from models_analytical.schedule.timeline import begin, transfer


@stage
def all_gather(k_in, owner, st, layer, r, n_here, finish):
    """Gathers ``layer``'s ``n_here`` parts (those of part row ``r``, each device's fraction of
    the output in ``st.frac``): each part leaves its sub-model, goes to every gatherer, and
    each gatherer concatenates. Returns ``finish`` advanced to the last concatenation."""
    c = owner[layer]
    for i in range(n_here):  # each part leaves its sub-model (to be sent, or gathered here)
        d = st.part_device[r, i]
        c_out = (
            k_in.segment_out_per_byte_s[k_in.device_type[d]]
            * st.frac[d]
            * k_in.out_bytes[layer]
            * st.slowdown[d]
        )
        st.part_end[d] += c_out
        st.dev_free[d] += c_out
        st.busy[d] += c_out
        st.energy[d] += c_out * k_in.overhead_power_w[k_in.device_type[d]]
    owner_cats = owner_concatenates(k_in, owner, st, layer, r, n_here)
    n_g, last_part = list_gatherers(owner, st, layer, r, n_here, owner_cats)
    send_parts(k_in, st, layer, r, n_here, n_g)
    st.ready[layer] = last_part  # nobody reads it from the owner unless it concatenates
    finish = concatenate(k_in, owner, st, layer, n_g, finish)
    if owner_cats:  # the owner gathers into a buffer the runtime keeps for good
        st.held[c] += k_in.out_bytes[layer]
        st.has_memory[c] = True
    return finish


@stage
def owner_concatenates(k_in, owner, st, layer, r, n_here):
    """Marks the devices that read ``layer``'s whole output (``need``: they compute a consumer
    or a part of one, or, for the owner, hold a graph output) and returns whether the owner
    concatenates the parts: it needs the whole, or a device without a part does (the owner
    forwards it)."""
    c = owner[layer]
    st.need[:] = False
    for j in range(k_in.out_ptr[layer], k_in.out_ptr[layer + 1]):
        m = st.row[k_in.out_dst[j]]
        for i in range(st.part_count[m]):
            st.need[st.part_device[m, i]] = True
    if k_in.is_output[layer]:
        st.need[c] = True
    if st.need[c]:
        return True
    n_need = 0
    for i in range(n_here):
        if st.need[st.part_device[r, i]]:
            n_need += 1
    n_all = 0
    for d in range(st.need.size):
        if st.need[d]:
            n_all += 1
    return n_all > n_need  # a device without a part needs the whole


@stage
def list_gatherers(owner, st, layer, r, n_here, owner_cats):
    """Lists the gatherers (``gatherers[:n_g]``): the part devices that need the whole, and
    the owner if it concatenates; each starts from its own part's end (``gather_in``; the
    owner without a part from 0). Returns ``n_g`` and when the last part ended."""
    c = owner[layer]
    n_g = 0
    owner_has_part = False
    last_part = 0.0
    for i in range(n_here):
        e = st.part_device[r, i]
        st.gather_in[e] = st.part_end[e]
        if st.part_end[e] > last_part:
            last_part = st.part_end[e]
        if e == c:
            owner_has_part = True
        if st.need[e] or (e == c and owner_cats):
            st.gatherers[n_g] = e
            n_g += 1
    if owner_cats and not owner_has_part:
        st.gather_in[c] = 0.0
        st.gatherers[n_g] = c
        n_g += 1
    return n_g, last_part


@stage
def send_parts(k_in, st, layer, r, n_here, n_g):
    """Sends every part to each other gatherer once it ends; a gatherer's concatenation waits
    for the last part in. A part sent is held on its device until its sends complete, at the
    end of the inference (:mod:`dse.runtime.rank.worker` waits for them there), and its device's
    sub-model ends with it."""
    for i in range(n_here):
        d = st.part_device[r, i]
        nbytes = st.frac[d] * k_in.out_bytes[layer]
        sends = False
        for j in range(n_g):
            e = st.gatherers[j]
            if e == d:
                continue
            a = transfer(k_in, st, d, e, nbytes, st.part_end[d])
            if a > st.gather_in[e]:
                st.gather_in[e] = a
            sends = True
        if sends:
            st.ends_at[d, layer] = True  # d just ran this part: its sub-model ends
            st.seg_current[d] = -1
            hold(st, d, layer, k_in.out_bytes.size, nbytes)


@stage
def concatenate(k_in, owner, st, layer, n_g, finish):
    """Each gatherer concatenates the parts once they are in and it is free (a step of its
    own, ending its sub-model), at the layer's per-part overhead. The owner's concatenation
    makes the layer ready; another's is held like a received tensor. Returns ``finish``
    advanced to the last one."""
    c = owner[layer]
    t = k_in.out_tid[layer]
    for j in range(n_g):
        e = st.gatherers[j]
        st.ends_at[e, layer] = True  # a gather step ends e's sub-model
        st.seg_current[e] = -1
        st.gathers_at[e, layer] = True
        ty = k_in.device_type[e]
        start = max(st.dev_free[e], st.gather_in[e])
        begin(st, e, start)
        cat = k_in.t_fixed[ty, layer] * st.slowdown[e]
        end = start + cat
        st.dev_free[e] = end
        st.busy[e] += cat
        st.energy[e] += cat * k_in.overhead_power_w[ty]
        if end > finish:
            finish = end
        if e == c:
            st.ready[layer] = end
        elif t >= 0:  # a gathered whole: held like a received tensor
            st.arrival[t, e] = end
            st.kept[t, e] = True
            st.tensor_bytes[t] = k_in.out_bytes[layer]
            st.has_memory[e] = True
    return finish
