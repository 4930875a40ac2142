"""Compiled decoding: gene matrices to the device of each layer and the part counts of each
splittable layer (thesis 4.2.1-4.2.2).

Loops over one mapping at a time, so a batch never builds [P, items, devices] temporaries.
Every kernel gives exactly the numbers of the numpy decoder it replaces (tests/reference.py
keeps those as the reference). Sizing the parts is the mapping's rule
(:mod:`dse.mapping.rules`). Callers allocate the outputs with numpy.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
def advanced_counts(genes, splits, anchor, is_split, device, counts):
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
                for s in range(n_split):  # not first[:] = cov: a slice copy compiles its
                    first[s] = cov[s]  # shape check's error message: seconds of compiling
            for s in range(n_split):
                if cov[s] >= 0:
                    counts[p, s, cov[s]] += 1
        for layer in range(n_layers):
            if not is_split[layer]:
                device[p, layer] = first[anchor[layer]]
            else:
                device[p, layer] = -1


@njit(cache=True, nogil=True)
def vertical_counts(genes, is_split, device, counts):
    """The vertical split-point encoding over all layers, row extended to the end: every layer
    on one device. Fills ``device[P, L]`` (-1 for splittable layers) and ``counts[P, S, D]``
    (zeros on entry)."""
    pop, n_layers = device.shape
    cov = np.empty(n_layers, dtype=np.int64)
    for p in range(pop):
        # extend a bool, not the literal True: the one _cover_row advanced_counts compiles
        _cover_row(genes[p], n_layers, np.bool_(True), cov)
        s = 0
        for layer in range(n_layers):
            if is_split[layer]:
                counts[p, s, cov[layer]] = 1
                device[p, layer] = -1
                s += 1
            else:
                device[p, layer] = cov[layer]


@njit(cache=True, nogil=True)
def naive_counts(genes, layer_of_gene, is_split, device, counts):
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
