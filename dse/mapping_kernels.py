"""The mapping contract's rules compiled, for the decoders and the model alike: one mapping's
share and owner (:mod:`dse.mapping`) from its whole numbers, written once."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def share_owner_one(device, split_channels, channels, consumer, producer, share, owner, anchor):
    """One mapping's share [L, D] (zeros on entry) and owner [L] from its whole numbers:
    ``device[L]`` (-1 for splittable layers) and ``split_channels[S, D]``: share = channels /
    the layer's channels, and the owner rule of :func:`dse.mapping.derive_owner` (a split layer
    is concatenated on the first device of its first consumer, else where its producer's
    output is). ``anchor[L]``: scratch."""
    n_layers, n_devices = share.shape
    s = 0
    for layer in range(n_layers):
        if device[layer] >= 0:
            share[layer, device[layer]] = 1.0
            anchor[layer] = device[layer]
            owner[layer] = -1  # not split: its anchor
            continue
        ch = float(max(channels[layer], 1))
        first, used = -1, 0
        for d in range(n_devices):
            c = split_channels[s, d]
            if c > 0:
                share[layer, d] = c / ch
                used += 1
                if first < 0:
                    first = d
        anchor[layer] = max(first, 0)
        owner[layer] = -2 if used > 1 else -1  # -2: split, resolved below
        s += 1
    for layer in range(n_layers):
        o = anchor[layer]
        if owner[layer] == -2:
            if consumer[layer] >= 0:
                o = anchor[consumer[layer]]
            elif producer[layer] >= 0:
                o = owner[producer[layer]]
        owner[layer] = o
