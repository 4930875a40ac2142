"""One layer of the schedule: each part on its device (inputs in, then its work), then its
output: whole on its owner, continued part by part by the layer that follows, or gathered."""

from __future__ import annotations

from models_analytical.schedule.bands import run_row_layer
from models_analytical.schedule.compiled import stage
from models_analytical.schedule.costs import part_share
from models_analytical.schedule.gather import all_gather
from models_analytical.schedule.memory import hold, hold_weights
from models_analytical.schedule.parts import host_slowdown
from models_analytical.schedule.receive import receive_inputs
from models_analytical.schedule.segments import enter_segment
from models_analytical.schedule.timeline import compute


@stage
def run_layer(k_in, owner, share, st, layer, finish):
    """Schedules ``layer``: on bands of rows (:func:`run_row_layer`), else whole or in channel
    parts (:func:`run_parts_layer`). Returns ``finish`` advanced to the layer's last step."""
    if st.root[layer] >= 0:
        host_slowdown(k_in, st, layer)
        return run_row_layer(k_in, owner, share, st, layer, finish)
    return run_parts_layer(k_in, owner, share, st, layer, finish)


@stage
def run_parts_layer(k_in, owner, share, st, layer, finish):
    """Schedules ``layer``, whole or in channel parts: its parts in device order, each once its
    device is free and its inputs are in, then its output. Returns ``finish`` advanced to the
    layer's last step."""
    r = st.row[layer]
    n_here = st.part_count[r]
    host_slowdown(k_in, st, r)
    for i in range(n_here):
        d = st.part_device[r, i]
        t_in = receive_inputs(k_in, owner, st, layer, d)
        run_part(k_in, owner, st, layer, d, share[r, d], n_here, t_in)
    c = owner[layer]
    nxt = k_in.follower[layer]
    if n_here == 1:
        st.ready[layer] = st.part_end[c]
        # the owner holds the whole output until its last reader anywhere has it (until the
        # end of the inference if it sends it: receive.receive)
        hold(st, c, layer, k_in.last_use[layer] + 1, k_in.out_bytes[layer])
        st.has_memory[c] = True
    elif nxt >= 0 and st.row[nxt] != nxt:
        # continued by its follower: each part is held on its device until the follower's
        # part reads it
        for i in range(n_here):
            d = st.part_device[r, i]
            hold(st, d, layer, nxt + 1, share[r, d] * k_in.out_bytes[layer])
    else:
        for i in range(n_here):
            d = st.part_device[r, i]
            st.frac[d] = share[r, d]
        finish = all_gather(k_in, owner, st, layer, r, n_here, finish)
    if st.ready[layer] > finish:
        finish = st.ready[layer]
    return finish


@stage
def run_part(k_in, owner, st, layer, d, s, n_here, t_in):
    """Runs d's part (share ``s``) of ``layer`` in a sub-model once d is free and its inputs
    are in (at ``t_in``): the part's work, its fixed per-layer cost, and its sub-model's costs,
    all slower by d's host slowdown."""
    ty = k_in.device_type[d]
    over = enter_segment(k_in, owner, st, layer, d, n_here)
    work = part_share(k_in, ty, layer, s, n_here) * k_in.t_work[ty, layer]
    compute(k_in, st, layer, d, work, over, t_in)
    hold_weights(k_in, st, layer, d, s)
