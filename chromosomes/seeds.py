"""Structured mappings to seed a first population: the fastest devices sharing every layer.

A random first population of a hybrid encoding almost never holds a mapping that splits every
heavy layer between the same two fast devices, and a search started from the one-device
mappings climbs towards one slowly (a split helps only once its neighbours are split too, or
the cut costs more than the part saves). These seeds put such mappings in from the start:
every splittable layer over the fastest k devices (k = 2 .. the most parts the encoding
gives a layer), the other layers on the fastest device. With ``chromosome.shares=speed`` the
parts are sized to the devices, so a fast GPU and a slow CPU finish together. The search puts
them in with ``algorithm.seed_structured=true``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chromosomes.base import Chromosome
from chromosomes.naive import NaiveChromosome
from chromosomes.split_point import AdvancedChromosome


def device_order(speed: np.ndarray, hosts: Sequence[str] | None = None) -> np.ndarray:
    """Devices from fastest to slowest by the sum over layers of each device's modelled time
    (1 / ``speed[L, D]``), ties to the lower index; given each device's host, the fastest
    device's host mates come right after it (parts on one host do not cross the network)."""
    total = (1.0 / np.asarray(speed, dtype=np.float64)).sum(axis=0)
    order = np.argsort(total, kind="stable")
    if hosts is None:
        return order
    near = np.array([hosts[d] == hosts[order[0]] for d in order])
    return np.concatenate([order[near], order[~near]])


def spread(
    chrom: Chromosome,
    devices: np.ndarray,
    first: int = 0,
    last: int | None = None,
    rows: bool = False,
) -> np.ndarray | None:
    """Genes of the mapping that gives splittable layers ``first`` .. ``last`` (indices among
    the splittable layers, inclusive; default all) one part on each of ``devices`` (by rows
    where they can and ``rows``), and every other layer whole to the first device; None when
    the encoding cannot give a layer that many parts (or splits no layer)."""
    devices = np.asarray(devices, dtype=np.int64)
    k = len(devices)
    last = len(chrom.split_layers) - 1 if last is None else last
    if isinstance(chrom, AdvancedChromosome):
        if k > chrom.splits:
            return None
        # row 0: the first device covers all; row r: it covers the layers before ``first``
        # again (a second part on one device is no split), device r the rest up to ``last``
        genes: np.ndarray = np.zeros((chrom.splits, chrom.n_devices), dtype=np.int64)
        genes[0, devices[0]] = len(chrom.split_layers)
        genes[1:k, devices[0]] = first
        genes[np.arange(1, k), devices[1:]] = last + 1
        return chrom.with_axes(genes.ravel(), rows)
    if isinstance(chrom, NaiveChromosome):
        if k > int(chrom.width.max()):
            return None
        genes = np.full(chrom.n_place, devices[0], dtype=np.int64)
        for layer in chrom.split_layers[first : last + 1]:
            start, width = chrom.start[layer], chrom.width[layer]
            genes[start : start + width] = devices[np.arange(width) % k]
        return chrom.with_axes(genes, rows)
    return None


def structured_seeds(
    chrom: Chromosome, speed: np.ndarray, hosts: Sequence[str] | None = None
) -> np.ndarray:
    """Gene vectors [n, n_genes] of :func:`spread` over the fastest 2, 3, ... devices
    (:func:`device_order`), as many as the encoding allows, by channels and, where the
    encoding splits by rows too, by rows; none for the vertical one (whose one-device
    mappings are seeded already)."""
    order = device_order(speed, hosts)
    rows = []
    for k in range(2, chrom.n_devices + 1):
        genes = spread(chrom, order[:k])
        if genes is None:
            break
        rows.append(genes)
        if chrom.spatial:
            by_rows = spread(chrom, order[:k], rows=True)
            assert by_rows is not None  # rows= changes the axes only, not whether k parts fit
            rows.append(by_rows)
    if not rows:
        return np.zeros((0, chrom.n_genes), dtype=np.int64)
    return np.stack(rows)


def seed_population(x: np.ndarray, chrom: Chromosome, model) -> np.ndarray:  # noqa: ANN001
    """Write :func:`structured_seeds` into a first population ``x`` [pop, n_genes] after its
    first ``n_devices`` rows (the one-device mappings), as many as fit; ``model`` (an
    :class:`~models_analytical.model.AnalyticalModel`) gives the devices' speeds and hosts.
    Returns ``x``."""
    seeds = structured_seeds(chrom, model.device_speed(), [d.host for d in model.platform.devices])
    room = max(len(x) - chrom.n_devices, 0)
    seeds = seeds[:room]
    x[chrom.n_devices : chrom.n_devices + len(seeds)] = seeds
    return x
