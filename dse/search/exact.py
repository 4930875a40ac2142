"""The exact latency-optimal vertical mapping of a chain network, by dynamic programming.

A vertical mapping (``chromosome=vertical``) puts every layer whole on one device, each device
taking at most one contiguous run of layers. For a chain (each layer reads only the previous
layer's output, the first one the input image, the last one makes the graph's output) the
model's latency of such a mapping is a sum of per-step costs: one inference runs one step at a
time (a layer waits for the previous layer's output, a transfer for the tensor it carries), so
no device or link queue of the schedule (:mod:`models_analytical.schedule`) ever makes a step
wait for another, and a receiving device is idle when its input arrives. The terms:

* layer ``l`` on device ``d``: its work and fixed cost on d's type (``t_work + t_fixed``);
* a run starting at layer ``l`` on ``d``: a sub-model run and its input per byte
  (``segment_run_s + segment_in_per_byte_s x bytes in``);
* a run ending at layer ``l`` on ``c``: its output per byte (``segment_out_per_byte_s``), then,
  unless ``l`` is the last layer, the transfer of that output to the next run's device
  (:func:`models_analytical.schedule.costs.transfer_s`, the model's own link cost);
* the image crossing from the entry device when the first run is elsewhere.

No device's speed depends on the others': ``shared_host_factor`` slows only parts of one
layer that run side by side, and a vertical mapping has none. :func:`vertical_latency` sums
the terms of any per-layer placement; tests/search/test_exact.py checks it against the
model's latency of every vertical mapping of small chains.

A device's memory in such a mapping depends on its own run only (its layers, the input it
receives and keeps, the output it sends, the image where it enters), so whether a run fits
is a table over (device, first layer, last layer), read off the model once. The entry device
holds the image even when it runs nothing: when that alone does not fit, it must run.

:func:`vertical_optimum` minimises the latency over runs (device, first and last layer) that
fit, as OptCNN does for additive costs. A dynamic programme backwards over (layer, device
holding its input) with devices allowed to come back gives, in ``O(L^2 D^2)``, the least
latency to the end from every such point: a lower bound of the vertical one
(``relaxed_latency_s`` from the start), exact whenever its placement gives each device one run.
An A* search over (next layer, devices used, last device) then finds the vertical optimum,
guided by that bound (the exact cost of a relaxation, hence consistent: the first placement it
completes is optimal); it expands few states beyond the relaxed placement's.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from numba import njit

from chromosomes import NaiveChromosome, VerticalChromosome
from dse.errors import DseError
from dse.mapping import Mappings
from models_analytical.model import AnalyticalModel
from models_analytical.schedule.costs import transfer_s

#: Most states the search over device sets expands before it gives up.
MAX_STATES = 1_000_000


@dataclass(frozen=True)
class Costs:
    """The terms of a vertical mapping's latency (seconds), per layer ``l`` and device ``d``."""

    node: np.ndarray  # [L, D] layer l on d
    enter: np.ndarray  # [L, D] a run starting at layer l on d
    leave: np.ndarray  # [L, D] a run ending at layer l on d (its output leaving the sub-model)
    move: np.ndarray  # [L, D, D] layer l's input from c to d (l = 0: the image, from the entry)
    entry: int


@dataclass(frozen=True)
class VerticalOptimum:
    """The latency-optimal vertical mapping under the model, within the devices' memory."""

    latency_s: float
    device: np.ndarray  # int64 [L] the device of each layer
    genes: np.ndarray  # int64 [D] the vertical encoding's genes of it
    mapping: Mappings
    relaxed_latency_s: float  # the optimum with devices allowed several runs (<= latency_s)


def chain_costs(model: AnalyticalModel) -> Costs:
    """The terms of :func:`vertical_latency` for ``model``; one line when the graph is not a
    chain or the latency is not a sum of them."""
    k = model.inputs
    n = len(model.graph)
    name = model.graph.name
    for layer in range(n):
        src = k.in_src[k.in_ptr[layer] : k.in_ptr[layer + 1]]
        if len(src) != 1 or src[0] != layer - 1:
            raise DseError(
                f"network '{name}' is not a chain (layer {layer} reads layers "
                f"{src.tolist()}): the exact vertical baseline takes chains only"
            )
    if k.is_output[:-1].any() or (np.diff(k.out_ptr)[:-1] != 1).any():
        raise DseError(
            f"network '{name}' is not a chain (an output is read by several layers or is a "
            "graph output before the last layer): the exact vertical baseline takes chains only"
        )
    ty = k.device_type
    n_dev = len(ty)
    in_b = k.in_bytes[k.in_ptr[:-1]]  # [L] each layer's one input
    node = (k.t_work[ty] + k.t_fixed[ty]).T  # [L, D]
    enter = k.segment_run_s[ty][None, :] + np.outer(in_b, k.segment_in_per_byte_s[ty])
    leave = np.outer(k.out_bytes, k.segment_out_per_byte_s[ty])
    move = np.zeros((n, n_dev, n_dev))
    for layer in range(n):
        for a in range(n_dev):
            for b in range(n_dev):
                if a != b:
                    move[layer, a, b] = transfer_s(k, a, b, in_b[layer])
    return Costs(node, enter, leave, move, int(k.entry))


def vertical_latency(costs: Costs, device: np.ndarray) -> float:
    """The model's latency of the chain mapping that puts layer l on ``device[l]``: the sum of
    the terms (module docstring). Devices may come back (the sum holds all the same)."""
    device = np.asarray(device, dtype=np.int64)
    d0 = int(device[0])
    total = (costs.move[0, costs.entry, d0] if d0 != costs.entry else 0.0) + costs.enter[0, d0]
    for layer in range(len(device)):
        d = int(device[layer])
        if layer > 0 and d != device[layer - 1]:
            c = int(device[layer - 1])
            total += costs.leave[layer - 1, c] + costs.move[layer, c, d] + costs.enter[layer, d]
        total += costs.node[layer, d]
    return float(total + costs.leave[-1, int(device[-1])])


def run_fits(model: AnalyticalModel) -> tuple[np.ndarray, bool]:
    """``fits[d, i, j]``: device d within its memory when it runs layers i..j (its memory in a
    vertical mapping of a chain depends on its run alone); and whether the entry device fits
    when it runs nothing (it holds the image all the same). Read off the model: one mapping
    per run, the other layers on another device."""
    graph, n_dev = model.graph, len(model.platform)
    n = len(graph)
    runs = [(d, i, j) for d in range(n_dev) for i in range(n) for j in range(i, n)]
    place = np.empty((len(runs) + 1, n), dtype=np.int64)
    for r, (d, i, j) in enumerate(runs):
        place[r] = (d + 1) % n_dev
        place[r, i : j + 1] = d
    entry = int(model.inputs.entry)
    place[-1] = (entry + 1) % n_dev  # everything elsewhere: the entry holds the image only
    mappings = NaiveChromosome(graph, n_dev, splits=1).decode(place)
    ev = model.evaluate(mappings)
    fits = np.zeros((n_dev, n, n), dtype=np.bool_)
    for r, (d, i, j) in enumerate(runs):
        fits[d, i, j] = ev.memory_mb[r, d] <= ev.capacity_mb[d]
    idle_fits = n_dev == 1 or bool(ev.memory_mb[-1, entry] <= ev.capacity_mb[entry])
    return fits, idle_fits


def vertical_optimum(model: AnalyticalModel) -> VerticalOptimum:
    """The vertical mapping of least modelled latency that fits in memory (module docstring);
    one line when none fits."""
    c = chain_costs(model)
    fits, idle_fits = run_fits(model)
    n, n_dev = c.node.shape
    prefix = np.vstack([np.zeros(n_dev), np.cumsum(c.node, axis=0)])  # [L + 1, D]
    args = (prefix, c.enter, c.leave, c.move, fits, c.entry)
    to_go = _to_go(*args)
    relaxed = float(to_go[0, c.entry])
    if not np.isfinite(relaxed):
        raise DseError(_NONE_FITS)
    best, device = _search(*args, idle_fits, to_go)
    genes = np.zeros(n_dev, dtype=np.int64)
    ends = np.flatnonzero(np.r_[device[1:] != device[:-1], True])  # last layer of each run
    genes[device[ends]] = ends + 1
    mapping = VerticalChromosome(model.graph, n_dev).decode(genes[None, :])
    return VerticalOptimum(best, device, genes, mapping, relaxed)


#: A state of :func:`_search`: the next layer, the devices used (a bit each), the last device.
State = tuple[int, int, int]

_NONE_FITS = "no vertical mapping fits in the devices' memory: there is no vertical optimum"


@njit(cache=True, nogil=True)
def _run_s(prefix, enter, leave, d, i, j):
    """A run of layers i..j on d: its start, its layers, its output leaving it."""
    return enter[i, d] + prefix[j + 1, d] - prefix[i, d] + leave[j, d]


@njit(cache=True, nogil=True)
def _to_go(prefix, enter, leave, move, fits, entry):
    """``to_go[i, c]``: the least latency of layers i.. when layer i - 1's output is on c
    (i = 0: the image on the entry ``c``), over runs that fit, a device allowed several runs
    (not two in a row): a lower bound of the vertical one, and exact where the devices' runs
    need not differ."""
    n, n_dev = enter.shape
    to_go = np.full((n + 1, n_dev), np.inf)
    to_go[n, :] = 0.0
    for i in range(n - 1, -1, -1):
        for c in range(n_dev):
            best = np.inf
            for d in range(n_dev):
                if d == c and (i > 0 or c != entry):
                    continue
                start = move[i, c, d] if d != c else 0.0
                for j in range(i, n):
                    if fits[d, i, j]:
                        t = start + _run_s(prefix, enter, leave, d, i, j) + to_go[j + 1, d]
                        if t < best:
                            best = t
            to_go[i, c] = best
    return to_go


def _search(
    prefix: np.ndarray,
    enter: np.ndarray,
    leave: np.ndarray,
    move: np.ndarray,
    fits: np.ndarray,
    entry: int,
    idle_fits: bool,
    to_go: np.ndarray,
) -> tuple[float, np.ndarray]:
    """Least latency with each device one run at most (the entry running one when it cannot
    hold the image idle), and its placement: A* over (next layer, devices used, last device),
    guided by ``to_go`` (a relaxation's exact cost, so consistent: the first goal taken is
    optimal)."""
    n, n_dev = enter.shape
    start = (0, 0, entry)
    g_best = {start: 0.0}
    parent: dict[State, State | None] = {start: None}
    heap = [(float(to_go[0, entry]), 0.0, start)]
    expanded = 0
    while heap:
        f, g, state = heapq.heappop(heap)
        if g > g_best[state]:
            continue
        i, used, c = state
        if i == n:
            if idle_fits or used >> entry & 1:
                return g, _placement(parent, state, n)
            continue
        expanded += 1
        if expanded > MAX_STATES:
            raise DseError(
                f"the exact vertical baseline gave up after {MAX_STATES} states of its search"
            )
        for d in range(n_dev):
            if used >> d & 1 or (d == c and i > 0):
                continue
            base = g + (move[i, c, d] if d != c else 0.0) + enter[i, d] - prefix[i, d]
            for j in np.flatnonzero(fits[d, i, i:]).tolist():
                j += i
                g2 = base + prefix[j + 1, d] + leave[j, d]
                nxt = (j + 1, used | 1 << d, d)
                if g2 < g_best.get(nxt, np.inf):
                    g_best[nxt] = g2
                    parent[nxt] = state
                    heapq.heappush(heap, (g2 + float(to_go[j + 1, d]), g2, nxt))
    raise DseError(_NONE_FITS)


def _placement(parent: dict[State, State | None], state: State, n: int) -> np.ndarray:
    device = np.full(n, -1, dtype=np.int64)
    prev = parent[state]
    while prev is not None:
        device[prev[0] : state[0]] = state[2]
        state, prev = prev, parent[prev]
    return device
