"""The analytical model: a batch of mappings -> objectives, constraints and per-device breakdown."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dse.graph import LayerGraph
from dse.mapping import MappingBatch
from models_analytical.layer_costs import LayerTables, layer_tables
from models_analytical.platform import KINDS, OP_CLASSES, Platform
from models_analytical.simulate import input_csr, simulate_batch

MB = 1e6
#: Objectives the search can minimise; the thesis's three come first.
OBJECTIVES = ("latency", "memory", "energy", "total_energy", "bytes", "period")


@dataclass(frozen=True)
class Evaluation:
    """Predictions for P mappings on D devices (seconds, MB, joules, bytes)."""

    latency_s: np.ndarray  # [P] makespan of one inference
    busy_s: np.ndarray  # [P, D] compute time
    comm_s: np.ndarray  # [P, D] time its transfers (sent or received) occupied links
    idle_s: np.ndarray  # [P, D] latency - busy on devices that take part, else 0
    memory_mb: np.ndarray  # [P, D] Eq. 4.9 on the liveness peak; 0 on unused devices
    energy_j: np.ndarray  # [P, D]
    bytes_sent: np.ndarray  # [P, D]
    used: np.ndarray  # bool [P, D]
    capacity_mb: np.ndarray  # [D]

    @cached_property
    def feasible(self) -> np.ndarray:
        return (self.memory_mb <= self.capacity_mb).all(axis=1)

    def constraints(self) -> np.ndarray:
        """pymoo-style G <= 0: memory over capacity, relative, per device."""
        return self.memory_mb / self.capacity_mb - 1.0

    def objective(self, name: str) -> np.ndarray:
        if name == "latency":
            return self.latency_s
        if name == "memory":
            return self.memory_mb.max(axis=1)
        if name == "energy":
            return self.energy_j.max(axis=1)
        if name == "total_energy":
            return self.energy_j.sum(axis=1)
        if name == "bytes":
            return self.bytes_sent.sum(axis=1)
        if name == "period":  # pipelined throughput: the busiest device or its links
            return np.maximum(self.busy_s.max(axis=1), self.comm_s.max(axis=1))
        raise KeyError(name)


class AnalyticalModel:
    """Evaluates mapping batches of one graph on one platform; build once, call often."""

    def __init__(self, graph: LayerGraph, platform: Platform) -> None:
        self.graph, self.platform = graph, platform
        self.tables: LayerTables = layer_tables(graph, platform)
        n = len(graph)
        self._csr = input_csr(
            graph.edge_src, graph.edge_dst, graph.edge_tensor, graph.edge_bytes, n
        )
        last_use = np.arange(n, dtype=np.int64)
        np.maximum.at(
            last_use, graph.edge_src[graph.edge_src >= 0], graph.edge_dst[graph.edge_src >= 0]
        )
        producers_of_outputs = {
            graph.producer[t.name] for t in graph.outputs if t.name in graph.producer
        }
        last_use[list(producers_of_outputs)] = n - 1
        self._last_use = last_use
        links = platform.link_arrays()
        self._links = (
            links["latency"],
            links["inv_bw"],
            links["energy"],
            links["channel"],
            int(links["channel"].max()) + 1,
        )
        self._kind = np.array([KINDS.index(d.kind) for d in platform.devices], dtype=np.int64)

        def per_kind(key: str) -> np.ndarray:
            return np.array(
                [
                    platform.coefficients[k].power_w[key] if k in platform.coefficients else 0.0
                    for k in KINDS
                ]
            )

        self._p_class = np.array(
            [
                [
                    platform.coefficients[k].power_w[c] if k in platform.coefficients else 0.0
                    for c in OP_CLASSES
                ]
                for k in KINDS
            ]
        )
        self._p_overhead = per_kind("overhead")
        self._idle_w = per_kind("idle")[self._kind]
        coeff = [platform.coefficients[d.kind] for d in platform.devices]
        self._mem_coef = np.array([c.memory_coefficient for c in coeff])
        self._mem_bias = np.array([c.memory_bias_mb for c in coeff])
        self._mem_layer = np.array([c.memory_per_layer_mb for c in coeff])
        self.capacity_mb = np.array([d.memory_mb for d in platform.devices])

    def evaluate(self, batch: MappingBatch) -> Evaluation:
        t = self.tables
        lat, inv_bw, e_byte, channel, n_channels = self._links
        latency, busy, comm, peak, energy, parts, sent = simulate_batch(
            np.ascontiguousarray(batch.share, dtype=np.float64),
            np.ascontiguousarray(batch.owner, dtype=np.int64),
            self._kind,
            t.t_work,
            t.t_fixed,
            t.op_class,
            t.out_bytes,
            t.weight_bytes,
            *self._csr,
            self._last_use,
            self.platform.entry,
            lat,
            inv_bw,
            e_byte,
            channel,
            n_channels,
            self.platform.weights == "streamed",
            self._p_class,
            self._p_overhead,
        )
        used = parts > 0
        idle = np.where(used, np.maximum(latency[:, None] - busy, 0.0), 0.0)
        energy = energy + idle * self._idle_w
        # Eq. 4.9, with a per-layer term for the runtime structures each layer keeps
        memory = np.where(
            used, (peak / MB) * self._mem_coef + self._mem_bias + parts * self._mem_layer, 0.0
        )
        return Evaluation(latency, busy, comm, idle, memory, energy, sent, used, self.capacity_mb)
