"""The mapping's rules, compiled once for the encodings, the model and the runtime alike.

A mapping (:class:`dse.mapping.Mappings`) gives every layer that cannot be split one device,
and every splittable layer s an axis (``axis[s]``: 0 output channels, 1 output rows) and a
whole number of units along it per device, ``sizes[s, d]``; ``units[axis, s]`` is what the
layer has along each axis (its output channels, its output rows). Its other forms follow from
these rules, written here and nowhere else:

* **Sizes from part counts.** An encoding says how many parts of a layer each device computes
  (``counts[s, d]``). With equal shares the layer is cut into ``sum(counts)`` near-equal
  contiguous parts in device order, the first ``units % parts`` one larger: 10 channels over
  three devices are 4, 3, 3 (:func:`equal_sizes`). Sized to the devices, device d gets the
  floor of ``units x counts[d] x speed[s, d] / sum(counts x speed[s])``, and the units left
  over go one each to the largest remainders, ties to the lower device (:func:`speed_sizes`).
  A layer never has more parts than units; a device whose part would be empty takes no part.
* **Share.** Device d computes ``sizes[s, d] / units`` of layer s (``units``: the layer's
  output channels or rows, at least 1); parts are contiguous ranges in device order (channels,
  or bands of rows).
* **Owner.** Every layer has one device holding its whole output: the device that runs it
  whole, or, for a split layer, where its parts are concatenated. Following the thesis
  (section 4.2) that is the device of the first part of its first consumer; for a layer
  without consumers, wherever its producer's whole output is (:func:`dense_one`).

The numpy forms of these rules are kept by the tests only, as the reference the kernels are
checked against (``tests/reference.py``). Callers allocate outputs with numpy: numba's own
allocation of a large array costs several times numpy's zeroed pages.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def equal_sizes(counts, units, axis, out):
    """``out[p, s, d]``: units of layer s device d computes when the layer is cut into
    ``sum(counts[p, s])`` near-equal contiguous parts in device order, the first ``units %
    parts`` one larger. ``counts`` and ``out`` are [P, S, D], ``units`` [2, S] (channels,
    rows), ``axis`` [P, S]."""
    pop, n_layers, n_devices = counts.shape
    for p in range(pop):
        for layer in range(n_layers):
            parts = 0
            for d in range(n_devices):
                parts += counts[p, layer, d]
            safe = max(parts, 1)
            ch = max(units[axis[p, layer], layer], 1)
            base, extra = ch // safe, ch % safe
            before = 0
            for d in range(n_devices):
                c = counts[p, layer, d]
                bonus = min(max(extra - before, 0), c)
                out[p, layer, d] = c * base + bonus
                before += c


@njit(cache=True, nogil=True)
def speed_sizes(counts, units, axis, speed, out):
    """``out[p, s, d]``: units of layer s device d computes when the layer's parts are sized to
    their devices' speeds: the floor of ``units x counts[d] x speed[s, d] / sum(counts x
    speed[s])``, then the units left over one each to the largest remainders (ties to the lower
    device; a device with no part never gets one). ``speed[S, D]``; ``counts``, ``out``
    [P, S, D]; ``units`` [2, S], ``axis`` [P, S] as :func:`equal_sizes`'s."""
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
            u = max(units[axis[p, layer], layer], 1)
            if used == 1:  # the whole layer on one device (the rule gives exactly this)
                out[p, layer, last] = u
                continue
            total = 0.0
            for d in range(n_devices):
                w[d] = counts[p, layer, d] * speed[layer, d]
                total += w[d]
            if not total > 0:
                total = 1.0
            ch = float(u)
            given = 0.0
            for d in range(n_devices):
                ideal = ch * w[d] / total
                base[d] = np.floor(ideal + 1e-9)
                given += base[d]
                frac[d] = ideal - base[d] if counts[p, layer, d] > 0 else -1.0
            for d in range(n_devices):
                out[p, layer, d] = int(base[d])
            # the `rem` largest remainders get one more unit each, ties to the lower device
            for _ in range(int(ch - given)):
                best = 0
                for d in range(1, n_devices):
                    if frac[d] > frac[best]:
                        best = d
                out[p, layer, best] += 1
                frac[best] = -np.inf


@njit(cache=True, nogil=True)
def dense_one(device, sizes, axis, units, consumer, producer, share, owner, anchor):
    """One mapping's ``share[L, D]`` (zeros on entry) and ``owner[L]`` from its whole numbers
    ``device[L]`` (-1 for splittable layers), ``sizes[S, D]`` and ``axis[S]``; ``units[2, L]``
    the layers' output channels and rows, ``consumer`` / ``producer`` [L] the graph's
    ``first_consumer`` / ``first_producer``; ``anchor[L]`` scratch."""
    n_layers, n_devices = share.shape
    s = 0
    for layer in range(n_layers):
        if device[layer] >= 0:
            share[layer, device[layer]] = 1.0
            anchor[layer] = device[layer]
            owner[layer] = -1  # not split: its anchor
            continue
        ch = float(max(units[axis[s], layer], 1))
        first, used = -1, 0
        for d in range(n_devices):
            c = sizes[s, d]
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


@njit(cache=True, nogil=True)
def dense(device, sizes, axis, units, consumer, producer, share, owner):
    """:func:`dense_one` of every mapping: ``share[P, L, D]`` (zeros on entry), ``owner[P, L]``."""
    anchor = np.empty(device.shape[1], dtype=np.int64)
    for p in range(device.shape[0]):
        dense_one(
            device[p], sizes[p], axis[p], units, consumer, producer, share[p], owner[p], anchor
        )
