"""What one step costs, from the kernel's inputs alone: a transfer's seconds and the share of a
layer's work one part of it pays."""

from __future__ import annotations

import numpy as np

from models_analytical.schedule.compiled import stage


@stage
def transfer_s(k_in, a, b, nbytes):
    """Seconds to move ``nbytes`` from device a to b: the link (its measured table, linear
    between points and beyond the last, or latency + bytes / bandwidth) plus the cost of
    cutting the work into segments on both ends (charged by the receiver's type; per byte,
    one cost between hosts and another between devices of one host)."""
    c = k_in.link_table[a, b]
    if c >= 0:
        xs = k_in.table_bytes[c]
        ys = k_in.table_s[c]
        i = np.searchsorted(xs, nbytes)
        i = min(max(i, 1), xs.size - 1)
        t = ys[i - 1] + (nbytes - xs[i - 1]) * (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
        t = max(t, ys[0])
    else:
        t = k_in.link_latency_s[a, b] + nbytes * k_in.link_s_per_byte[a, b]
    tb = k_in.device_type[b]
    if k_in.host[a] == k_in.host[b]:
        per_byte = k_in.transfer_per_byte_same_host_s[tb]
    else:
        per_byte = k_in.transfer_per_byte_s[tb]
    return t + k_in.transfer_fixed_s[tb] + nbytes * per_byte


@stage
def part_share(k_in, ty, layer, s, n_here):
    """The share of a layer's work a part of share ``s`` costs on device type ``ty``, the
    layer being cut into ``n_here`` parts. Split, a part pays the layer's fixed share ``f``
    (``part_fixed``: its input's transform, whatever its channels) and the rest for its whole
    channel blocks, ``f + (1 - f) x blocks``, slower by ``split_work_factor`` (parts of one
    layer run at the same time on the devices of a host, which share its memory bandwidth and
    caches)."""
    if n_here < 2:
        return s
    b = k_in.channel_block[ty, layer]
    if b <= 1.0:
        blocks = s
    else:
        c = k_in.channels[layer]
        blocks = min(np.ceil(s * c / b - 1e-9) * b / c, 1.0)
    f = k_in.part_fixed[ty, layer]
    return (f + (1.0 - f) * blocks) * k_in.split_work_factor[ty]


@stage
def band_share(k_in, ty, layer, s, n_here):
    """The share of a layer's work a band of share ``s`` of its output rows costs on device
    type ``ty``, the layer being cut into ``n_here`` bands: the layer's fixed share of a band
    ``f`` (``row_fixed``) and the rest in proportion to its rows, ``f + (1 - f) x s`` (without
    ``split_work_factor``, which the caller applies where bands run side by side)."""
    if n_here < 2:
        return s
    f = k_in.row_fixed[ty, layer]
    return f + (1.0 - f) * s
