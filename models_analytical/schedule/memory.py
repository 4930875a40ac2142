"""Memory per device: allocate-then-free liveness over the layer order (seed 002), as the
runtime (:mod:`dse.runtime.rank.worker`) holds tensors, and the buffers it keeps for good."""

from __future__ import annotations

from models_analytical.schedule.compiled import stage


@stage
def hold(st, d, first, stop, nbytes):
    """Device d holds ``nbytes`` from step ``first`` until before step ``stop`` (the number of
    layers: to the end of the inference)."""
    st.mem_delta[d, first] += nbytes
    st.mem_delta[d, stop] -= nbytes


@stage
def hold_weights(k_in, st, layer, d, s):
    """The weights of d's part (share ``s``) of ``layer``: held for its step (streamed) or the
    whole run (resident)."""
    wb = s * k_in.weight_bytes[layer]
    st.has_memory[d] = True
    if k_in.streamed:
        hold(st, d, layer, layer + 1, wb)
    else:
        hold(st, d, 0, k_in.out_bytes.size, wb)


@stage
def held_buffers(st):
    """Receive and gather buffers, and the input image where it enters: allocated once by the
    runtime and kept for good (``held``, apart from the peak of what comes and goes)."""
    n_tensors, n_dev = st.kept.shape
    for t in range(n_tensors):
        for d in range(n_dev):
            if st.kept[t, d]:
                st.held[d] += st.tensor_bytes[t]


@stage
def memory_peaks(st):
    """Each device's peak of what it holds over the layer order."""
    n_dev, n_steps = st.mem_delta.shape
    for d in range(n_dev):
        if not st.has_memory[d]:
            continue
        acc = 0.0
        peak = 0.0
        for i in range(n_steps - 1):
            acc += st.mem_delta[d, i]
            if acc > peak:
                peak = acc
        st.peak[d] = peak
