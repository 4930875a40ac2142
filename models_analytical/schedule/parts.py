"""Where each layer's parts run in one mapping: the devices of each part row, which inputs a
part reads itself, and the host slowdown of each part."""

from __future__ import annotations

from models_analytical.schedule.compiled import stage


@stage
def assign_parts(k_in, share, st):
    """Each layer's part row and devices: a layer runs with its own shares (its parts on the
    devices with a share, in index order), or, when it follows a layer split into several
    parts by channels (``follows``: a channel-local layer), on that layer's parts (``row``:
    the split layer's row); a layer on bands of rows (``st.root``) on the devices whose band
    of it is not empty."""
    n_layers, n_dev = share.shape
    rows = st.rows_on[0]
    for layer in range(n_layers):
        st.row[layer] = layer
        if rows and st.root[layer] >= 0:
            cnt = 0
            for d in range(n_dev):
                if st.band_hi[layer, d] > st.band_lo[layer, d]:
                    st.part_device[layer, cnt] = d
                    cnt += 1
            st.part_count[layer] = cnt
            continue
        f = k_in.follows[layer]
        if f >= 0 and st.part_count[st.row[f]] > 1 and not (rows and st.root[f] >= 0):
            st.row[layer] = st.row[f]
            continue
        cnt = 0
        for d in range(n_dev):
            if share[layer, d] > 0.0:
                st.part_device[layer, cnt] = d
                cnt += 1
        st.part_count[layer] = cnt


@stage
def inputs_end(k_in, st, layer):
    """End of the inputs a part of ``layer`` receives itself (``in_ptr`` CSR): none when the
    layer runs on another's parts (each part reads the part made before on its device)."""
    return k_in.in_ptr[layer] if st.row[layer] != layer else k_in.in_ptr[layer + 1]


@stage
def host_slowdown(k_in, st, r):
    """The host slowdown of row ``r``'s parts: a part runs ``shared_host_factor`` times slower
    (its work and its sub-model's costs) where another part of the row runs on a device of its
    host, side by side with it (they share the host's caches and memory bandwidth, and on a
    shared core its time); else at speed. A device's slowdown is its latest part's: what it
    sends after that part is charged with it."""
    n = st.part_count[r]
    for i in range(n):
        d = st.part_device[r, i]
        slow = 1.0
        for j in range(n):
            e = st.part_device[r, j]
            if e != d and k_in.host[e] == k_in.host[d]:
                slow = k_in.shared_host_factor[k_in.device_type[d]]
        st.slowdown[d] = slow
