"""The mapping's rules in plain numpy, as they were written before being compiled.

:mod:`dse.mapping.rules` is the one implementation the tool runs; these slow, direct forms are
the independent reference the tests check it against, number for number.
"""

from __future__ import annotations

import numpy as np


def first_consumer(graph) -> np.ndarray:
    """For every layer, the first layer (in topological order) that reads its output, or -1."""
    first = np.full(len(graph), -1, dtype=np.int64)
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if s >= 0 and (first[s] < 0 or d < first[s]):
            first[s] = d
    return first


def first_producer(graph) -> np.ndarray:
    """For every layer, the producer of its first activation input, or -1 (graph input)."""
    prod = np.full(len(graph), -1, dtype=np.int64)
    seen = np.zeros(len(graph), dtype=bool)
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if not seen[d]:
            prod[d], seen[d] = s, True
    return prod


def derive_owner(graph, share: np.ndarray) -> np.ndarray:
    """The owner (concat device) of every layer of every mapping in ``share[P, L, D]``: the
    device of the first part of the first consumer, else where the producer's output is."""
    anchor = np.argmax(share > 0, axis=2)
    owner = anchor.copy()
    split = (share > 0).sum(axis=2) > 1
    consumer, producer = first_consumer(graph), first_producer(graph)
    for layer in np.flatnonzero(split.any(axis=0)):
        rows = split[:, layer]
        if consumer[layer] >= 0:
            owner[rows, layer] = anchor[rows, consumer[layer]]
        elif producer[layer] >= 0:
            owner[rows, layer] = owner[rows, producer[layer]]
    return owner


def shares_from_counts(counts: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Channel fractions when a layer is cut into sum(counts) near-equal contiguous parts, the
    first ``channels % parts`` one channel larger."""
    parts = counts.sum(axis=-1, keepdims=True)
    safe = np.maximum(parts, 1)
    ch = channels.reshape((1,) * (counts.ndim - 2) + (-1, 1)).astype(np.int64)
    ch = np.maximum(ch, 1)
    base, extra = ch // safe, ch % safe
    before = np.cumsum(counts, axis=-1) - counts
    bonus = np.clip(extra - before, 0, counts)
    return (counts * base + bonus) / ch


def shares_by_speed(counts: np.ndarray, channels: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Channel fractions sized to the devices' speeds: floors, then the largest remainders
    (ties to the lower device), a device with no part never getting one."""
    w = counts * speed.reshape((1,) * (counts.ndim - 2) + speed.shape)
    total = w.sum(axis=-1, keepdims=True)
    ch = np.maximum(channels.reshape((1,) * (counts.ndim - 2) + (-1, 1)), 1).astype(np.float64)
    ideal = ch * w / np.where(total > 0, total, 1.0)
    base = np.floor(ideal + 1e-9)
    rem = (ch[..., 0] - base.sum(axis=-1)).astype(np.int64)
    frac = np.where(counts > 0, ideal - base, -1.0)
    order = np.argsort(-frac, axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(order.shape[-1]), axis=-1)
    base += rank < rem[..., None]
    return base / ch


def dense_from_devices(graph, on: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(share, owner) of boolean ``on[P, L, D]`` with equal parts."""
    share = shares_from_counts(on.astype(np.int64), graph.out_channels)
    return share, derive_owner(graph, share)
