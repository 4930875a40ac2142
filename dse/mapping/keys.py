"""A mapping's identity: one 64-bit key, compiled. The search compares keys to skip mappings
it has seen, and a deployment names its mapping by its key.

A mapping in whole numbers (:class:`dse.mapping.Mappings`) is the device of every layer that
is not splittable, the units each device computes of every splittable layer and the axis each
is split along. The key sums splitmix64 hashes of each number with its position (non-zero
unit counts and axes only: a mapping split by channels alone keeps the key it had before
rows could be split), so two
mappings share a key only when their numbers are equal or by a 64-bit collision (about 1 in
10^8 for a run of a million mappings). One pass over each mapping, no bytes built, no
per-mapping Python.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, nogil=True, inline="always")
def _mix(h, v):
    """splitmix64 of ``h ^ v`` (a bijection of 64-bit words with full avalanche)."""
    z = (h ^ v) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def hash_mappings(device, sizes, axis, out):
    """``out[p]`` (uint64) = the key of mapping p: ``device[P, L]`` (-1 for splittable layers),
    ``sizes[P, S, D]`` and ``axis[P, S]``. Each (position, value) is hashed on its own and the
    hashes are summed (Zobrist-style): no chain from one number to the next, so the CPU
    overlaps them."""
    pop, n_layers = device.shape
    n_split, n_devices = sizes.shape[1], sizes.shape[2]
    flat = sizes.reshape(pop, n_split * n_devices)
    for p in range(pop):
        h = np.uint64(0)
        for layer in range(n_layers):
            d = device[p, layer]
            if d >= 0:
                h += _mix(np.uint64(layer) * _GOLDEN, np.uint64(d))
        for i in range(n_split * n_devices):
            c = flat[p, i]
            if c != 0:
                h += _mix(np.uint64(n_layers + i) * _GOLDEN, np.uint64(c & 0xFFFFFFFF))
        for s in range(n_split):
            if axis[p, s] != 0:
                pos = np.uint64(n_layers + n_split * n_devices + s)
                h += _mix(pos * _GOLDEN, np.uint64(axis[p, s]))
        out[p] = h
