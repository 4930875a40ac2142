"""Compiled decoding: gene matrices to per-layer part counts, channel counts, shares and owners.

The encodings' numpy rules (thesis 4.2.1-4.2.2, :mod:`dse.mapping`) written as loops over one
mapping at a time, so a batch never builds [P, items, devices] temporaries. Every kernel gives
exactly the numbers of the numpy rule it replaces (tests/test_chromosomes.py keeps the numpy
decoders as the reference). Callers allocate the outputs with numpy: numba's own allocation of
a large array costs several times numpy's zeroed pages.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dse.mapping_kernels import share_owner_one


@njit(cache=True, nogil=True)
def _cover_row(values, n_items, extend, out):
    """``out[i]`` = the device covering item i+1 in one row of split points (the smallest value
    >= i+1, ties to the lowest device), -1 if none; with ``extend``, items past the row's
    largest value go to the first device holding it. The devices are sorted by (value, index)
    once, then the items walk along them."""
    n = values.shape[0]
    last = 0
    for d in range(1, n):
        if values[d] > values[last]:
            last = d
    order = np.empty(n, dtype=np.int64)
    for d in range(n):  # insertion sort by (value, index): stable, rows are short
        j = d
        while j > 0 and values[order[j - 1]] > values[d]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = d
    j = 0
    for i in range(n_items):
        item = i + 1
        while j < n and values[order[j]] < item:
            j += 1
        if j < n:
            out[i] = order[j]
        else:
            out[i] = last if extend else -1


@njit(cache=True, nogil=True)
def advanced_parts(genes, splits, anchor, is_split, device, counts):
    """The advanced split-point encoding: row r gives each splittable layer's r-th part to the
    device covering it, row 0 extended to the end; a layer that cannot be split goes whole to
    the device of the first part of its anchor (a splittable index). Fills ``device[P, L]``
    (-1 for splittable layers) and ``counts[P, S, D]`` (zeros on entry), the parts of each
    splittable layer."""
    pop, n_layers = device.shape
    n_split, n_devices = counts.shape[1], counts.shape[2]
    cov = np.empty(n_split, dtype=np.int64)
    first = np.empty(n_split, dtype=np.int64)
    for p in range(pop):
        for r in range(splits):
            _cover_row(genes[p, r * n_devices : (r + 1) * n_devices], n_split, r == 0, cov)
            if r == 0:
                first[:] = cov
            for s in range(n_split):
                if cov[s] >= 0:
                    counts[p, s, cov[s]] += 1
        for layer in range(n_layers):
            if not is_split[layer]:
                device[p, layer] = first[anchor[layer]]
            else:
                device[p, layer] = -1


@njit(cache=True, nogil=True)
def vertical_parts(genes, is_split, device, counts):
    """The vertical split-point encoding over all layers, row extended to the end: every layer
    on one device. Fills ``device[P, L]`` (-1 for splittable layers) and ``counts[P, S, D]``
    (zeros on entry)."""
    pop, n_layers = device.shape
    cov = np.empty(n_layers, dtype=np.int64)
    for p in range(pop):
        _cover_row(genes[p], n_layers, True, cov)
        s = 0
        for layer in range(n_layers):
            if is_split[layer]:
                counts[p, s, cov[layer]] = 1
                device[p, layer] = -1
                s += 1
            else:
                device[p, layer] = cov[layer]


@njit(cache=True, nogil=True)
def naive_parts(genes, layer_of_gene, is_split, device, counts):
    """The naive encoding: each splittable layer gets one part on every distinct device its
    genes name, any other layer goes to its one gene's device. Fills ``device[P, L]`` (-1 for
    splittable layers) and ``counts[P, S, D]`` (zeros on entry; 0 or 1)."""
    pop, n_genes = genes.shape
    n_layers = is_split.shape[0]
    device[:] = -1
    split_index = np.full(n_layers, -1, dtype=np.int64)
    n_split = 0
    for layer in range(n_layers):
        if is_split[layer]:
            split_index[layer] = n_split
            n_split += 1
    for p in range(pop):
        for g in range(n_genes):
            s = split_index[layer_of_gene[g]]
            if s >= 0:
                counts[p, s, genes[p, g]] = 1
            else:
                device[p, layer_of_gene[g]] = genes[p, g]


@njit(cache=True, nogil=True)
def equal_channels(counts, channels, out):
    """Channels per part when layer s is cut into sum(counts[p, s]) near-equal contiguous parts
    in device order, the first ``channels % parts`` one larger (:func:`dse.mapping.
    shares_from_counts` times the channels), into ``out`` shaped like ``counts[P, S, D]``."""
    pop, n_layers, n_devices = counts.shape
    for p in range(pop):
        for layer in range(n_layers):
            parts = 0
            for d in range(n_devices):
                parts += counts[p, layer, d]
            safe = max(parts, 1)
            ch = max(channels[layer], 1)
            base, extra = ch // safe, ch % safe
            before = 0
            for d in range(n_devices):
                c = counts[p, layer, d]
                bonus = min(max(extra - before, 0), c)
                out[p, layer, d] = c * base + bonus
                before += c


@njit(cache=True, nogil=True)
def speed_channels(counts, channels, speed, out):
    """Channels per part when layer s's parts are sized to their devices' speeds
    (:func:`dse.mapping.shares_by_speed` times the channels, number for number): device d gets
    the floor of ``channels x counts[d] x speed[s, d] / sum(counts x speed[s])``, then the
    channels left over go one each to the largest remainders (ties to the lower device; a
    device with no part never gets one). ``speed[S, D]``; fills ``out`` shaped like
    ``counts[P, S, D]``."""
    pop, n_layers, n_devices = counts.shape
    w = np.empty(n_devices)
    base = np.empty(n_devices)
    frac = np.empty(n_devices)
    for p in range(pop):
        for layer in range(n_layers):
            used, last = 0, 0
            for d in range(n_devices):
                out[p, layer, d] = 0
                if counts[p, layer, d] > 0:
                    used += 1
                    last = d
            if used == 1:  # the whole layer on one device (the rule gives exactly this)
                out[p, layer, last] = max(channels[layer], 1)
                continue
            total = 0.0
            for d in range(n_devices):
                w[d] = counts[p, layer, d] * speed[layer, d]
                total += w[d]
            if not total > 0:
                total = 1.0
            ch = float(max(channels[layer], 1))
            given = 0.0
            for d in range(n_devices):
                ideal = ch * w[d] / total
                base[d] = np.floor(ideal + 1e-9)
                given += base[d]
                frac[d] = ideal - base[d] if counts[p, layer, d] > 0 else -1.0
            for d in range(n_devices):
                out[p, layer, d] = int(base[d])
            # the `rem` largest remainders get one more channel each, ties to the lower device
            for _ in range(int(ch - given)):
                best = 0
                for d in range(1, n_devices):
                    if frac[d] > frac[best]:
                        best = d
                out[p, layer, best] += 1
                frac[best] = -np.inf


@njit(cache=True, nogil=True)
def shares_and_owner(device, split_channels, channels, consumer, producer, share, owner):
    """The mapping batch of ``device[P, L]`` (layers that are not split) and
    ``split_channels[P, S, D]`` (channels of each splittable layer per device): share =
    channels / the layer's channels, and the owner rule of :func:`dse.mapping.derive_owner` (a
    split layer is concatenated on the first device of its first consumer, else where its
    producer's output is). Fills ``share[P, L, D]`` (zeros on entry: allocated by numpy, whose
    zeroed pages cost far less than numba's) and ``owner[P, L]``."""
    anchor = np.empty(device.shape[1], dtype=np.int64)
    for p in range(device.shape[0]):
        share_owner_one(
            device[p], split_channels[p], channels, consumer, producer, share[p], owner[p], anchor
        )
