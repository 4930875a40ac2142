"""Harder enumerable search cases: heterogeneous devices, slow links, binding memory, and the
exact front of every encoding over them.

Device types (:func:`hetero_coefficients`), made up for these cases and no real board:

* ``cpu_big``: a fast, power-hungry CPU (2 GMAC/s on plain convolutions, 30 W);
* ``cpu_small``: a slow, frugal CPU (0.5 GMAC/s, 2 W), where the image enters;
* ``gpu``: fast on convolutions (12 GMAC/s) but slow on everything else, with a 1 ms launch
  per layer, a 6 MB context and little memory.

Each platform (:data:`CASES`) joins them over links far slower than a board's own, so where a
layer runs and how it is split trades latency against the busiest device's memory and energy.
:func:`every_mapping` lists every distinct mapping an encoding can express (deduplicated by
mapping key, as the search dedupes), :func:`truth` scores them all and keeps the Pareto front.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import onnx
from onnx import helper

from chromosomes import CHROMOSOMES, Chromosome, NaiveChromosome, make_chromosome
from dse.mapping import Mappings
from dse.net.build import build_graph
from dse.net.graph import LayerGraph
from dse.platform import Device, Link, Platform
from dse.search.problem import MappingProblem
from models_analytical.coefficients import OP_CLASSES, Coefficients, Memory, TypeCoefficients
from models_analytical.model import AnalyticalModel
from tests.helpers.onnx_factory import model, weight

OBJECTIVES = ["latency", "memory", "energy"]  # the app's default


def _type(
    rate: float,
    factors: tuple[float, float, float, float],
    overhead_s: float,
    power: float,
    idle: float,
    bias_mb: float,
) -> TypeCoefficients:
    return TypeCoefficients(
        frequency_hz=rate,
        layer=dict(zip(OP_CLASSES, factors, strict=True)),
        layer_overhead_s=overhead_s,
        memory=Memory(coefficient=1.0, bias_mb=bias_mb, per_layer_mb=0.05),
        power_w={**{c: power for c in OP_CLASSES}, "overhead": power / 2, "idle": idle},
    )


def hetero_coefficients() -> Coefficients:
    """Three device types (module docstring); op class factors: Winograd conv, conv, fc,
    elementwise (MAC/cycle)."""
    return Coefficients(
        {
            "cpu_big": _type(1e9, (4.0, 2.0, 1.0, 0.5), 1e-4, 30.0, 5.0, 0.5),
            "cpu_small": _type(5e8, (2.0, 1.0, 0.5, 0.25), 2e-4, 2.0, 0.3, 0.2),
            "gpu": _type(1e9, (24.0, 12.0, 0.4, 0.1), 1e-3, 8.0, 1.0, 6.0),
        }
    )


def _platform(name: str, spec: list[tuple[str, str, str, float]], network: Link) -> Platform:
    """Devices (host, kind, type, memory MB), the first the entry; boards joined by
    ``network``; a board's CPU and GPU by a 1 GB/s link."""
    devices = tuple(Device(f"{h}_{k}{i}", h, k, 1, mb, t) for i, (h, k, t, mb) in enumerate(spec))
    links = {
        "network": network,
        "cpu_gpu": Link(5e-5, 1e9, 1e-10),
        "same_host": Link(2e-5, 2e9, 1e-10),
    }
    return Platform(name, devices, links, entry=0, weights="resident")


def conv_pool_fc() -> onnx.ModelProto:
    """conv 3x3 (32 -> 64, 32x32) -> relu -> maxpool -> conv 3x3 (64 -> 64) -> relu -> maxpool
    -> flatten -> gemm (4096 -> 128): three splittable layers among eight; 2.3 MB of weights,
    the fc's 2.1 MB."""
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("MaxPool", ["r0"], ["p0"], name="pool0", **pool),
        helper.make_node("Conv", ["p0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", **pool),
        helper.make_node("Flatten", ["p1"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w2"], ["y"], name="fc", transB=1),
    ]
    inits = [weight("w0", [64, 32, 3, 3], 0), weight("w1", [64, 64, 3, 3], 1)]
    inits.append(weight("w2", [128, 64 * 8 * 8], 2))
    return model(nodes, {"x": [1, 32, 32, 32]}, ["y"], inits)


def conv_chain() -> onnx.ModelProto:
    """conv -> relu x 3, 32 -> 64 -> 64 -> 32 channels at 24x24: three heavy splittable
    layers, six layers."""
    nodes, inits, prev = [], [], "x"
    for i, (cin, cout) in enumerate([(32, 64), (64, 64), (64, 32)]):
        nodes.append(
            helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1])
        )
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        inits.append(weight(f"w{i}", [cout, cin, 3, 3], seed=i))
        prev = f"r{i}"
    return model(nodes, {"x": [1, 32, 24, 24]}, [prev], inits)


NETS = {"conv_pool_fc": conv_pool_fc, "conv_chain": conv_chain}

#: name -> (network, devices (host, kind, type, memory MB), link between boards). Distinct
#: mappings / points of the true front (objectives latency, memory, energy), by encoding:
#: board_gpu_cpu: naive 83,349 / 11, advanced-2 408 / 6, advanced-3 4,500 / 6, vertical 171 / 7;
#: two_boards: naive 201,600 / 38, advanced-2 2,860 / 35, advanced-3 60,298 / 61, vertical
#: 544 / 25. Memory binds: 27 % and 8 % of the naive mappings fit.
CASES: dict[str, tuple[str, list[tuple[str, str, str, float]], Link]] = {
    # a board with a slow CPU (the entry, 3 MB) and a GPU (7 MB: the fc's weights do not fit
    # beside its context), and a fast CPU on another board over a 5 MB/s, 1 ms link
    "board_gpu_cpu": (
        "conv_pool_fc",
        [("a", "cpu", "cpu_small", 3.0), ("a", "gpu", "gpu", 7.0), ("b", "cpu", "cpu_big", 64.0)],
        Link(1e-3, 5e6, 5e-8),
    ),
    # a board with a slow CPU (the entry, 2 MB) and a GPU, a second board's GPU, and a fast
    # CPU on a third, over 20 MB/s links: no GPU holds the whole network beside its context
    "two_boards": (
        "conv_chain",
        [
            ("a", "cpu", "cpu_small", 2.0),
            ("a", "gpu", "gpu", 6.6),
            ("b", "gpu", "gpu", 6.6),
            ("c", "cpu", "cpu_big", 64.0),
        ],
        Link(5e-4, 2e7, 5e-8),
    ),
}


def graph(net: str) -> LayerGraph:
    return build_graph(NETS[net](), net)


def problem(case: str, chromosome: str, splits: int | None = None) -> MappingProblem:
    """The search problem of ``case`` with the ``chromosome`` encoding (parts sized to the
    devices' speeds, the app's default ``chromosome.shares=speed``)."""
    net, spec, link = CASES[case]
    g = graph(net)
    m = AnalyticalModel(g, _platform(case, spec, link), hetero_coefficients(), threads=1)
    make_chromosome(chromosome, g, len(spec), splits=splits)  # its checks
    chrom = CHROMOSOMES[chromosome](g, len(spec), splits=splits, speed=m.device_speed())
    return MappingProblem(chrom, m, OBJECTIVES)


def _naive_genes(chrom: NaiveChromosome) -> np.ndarray:
    """One gene vector per distinct naive mapping: each splittable layer's genes name a set of
    at most ``width`` devices (the first repeated), every other layer's gene a device."""
    choices = []
    for layer in range(len(chrom.graph)):
        w = int(chrom.width[layer])
        if not chrom.graph.splittable[layer]:
            choices.append([(d,) for d in range(chrom.n_devices)])
            continue
        rows = []
        for k in range(1, w + 1):
            for subset in itertools.combinations(range(chrom.n_devices), k):
                rows.append(subset + (subset[0],) * (w - k))
        choices.append(rows)
    return np.array(
        [sum(combo, ()) for combo in itertools.product(*choices)], dtype=np.int64
    ).reshape(-1, chrom.n_genes)


def every_mapping(chrom: Chromosome, chunk: int = 1 << 18) -> Mappings:
    """Every distinct mapping ``chrom`` can express, each once (by mapping key)."""
    if isinstance(chrom, NaiveChromosome):
        genes = _naive_genes(chrom)
        mappings = chrom.decode(genes)
        _, first = np.unique(mappings.keys(), return_index=True)
        return mappings.take(np.sort(first))
    radix = (chrom.upper + 1).astype(np.int64)
    total = int(np.prod(radix))
    batches, seen = [], set()
    for lo in range(0, total, chunk):
        idx = np.arange(lo, min(lo + chunk, total), dtype=np.int64)
        genes = np.empty((len(idx), chrom.n_genes), dtype=np.int64)
        for j in range(chrom.n_genes - 1, -1, -1):  # mixed radix, last gene fastest
            genes[:, j] = idx % radix[j]
            idx //= radix[j]
        m = chrom.decode(genes)
        keys = m.keys()
        _, first = np.unique(keys, return_index=True)
        keep = [i for i in np.sort(first).tolist() if int(keys[i]) not in seen]
        seen.update(keys[keep].tolist())
        batches.append(m.take(np.array(keep, dtype=np.int64)))
    return Mappings.concat(batches)


def non_dominated(f: np.ndarray) -> np.ndarray:
    """bool [n]: the rows of ``f`` no other row dominates (minimising every column)."""
    order = np.lexsort(f.T[::-1])
    f_sorted = f[order]
    keep = np.ones(len(f), dtype=bool)
    front: list[np.ndarray] = []
    for i, row in enumerate(f_sorted):  # sorted: a row can only be dominated by earlier ones
        if front:
            prev = np.array(front)
            if ((prev <= row).all(axis=1) & (prev < row).any(axis=1)).any():
                keep[i] = False
                continue
        front.append(row)
    out = np.zeros(len(f), dtype=bool)
    out[order[keep]] = True
    return out


def truth(p: MappingProblem) -> tuple[np.ndarray, int, float]:
    """The true front (objectives of its distinct points), the number of distinct mappings and
    their feasible share."""
    mappings = every_mapping(p.chromosome)
    F, G = [], []
    for lo in range(0, len(mappings), 1 << 16):
        f, g = p.evaluate_mappings(mappings.take(slice(lo, lo + (1 << 16))))
        F.append(f)
        G.append(g)
    f, g = np.concatenate(F), np.concatenate(G)
    feasible = g[:, 0] <= 0
    ff = np.unique(f[feasible], axis=0)
    return ff[non_dominated(ff)], len(mappings), float(feasible.mean())


@functools.cache
def case_truth(case: str, chromosome: str, splits: int | None = None) -> tuple:
    """:func:`truth` of :func:`problem` (``case``, ``chromosome``, ``splits``), computed once
    per test session (seconds each: every mapping of the space evaluated); the front is
    read-only."""
    front, n_distinct, feasible = truth(problem(case, chromosome, splits))
    front.setflags(write=False)
    return front, n_distinct, feasible
