"""The analytical model: a batch of mappings -> per-device figures, feasibility, constraints.

Objectives are computed from an :class:`Evaluation` by :mod:`dse.objectives`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import numba
import numpy as np

from dse.mapping import Mappings
from dse.mapping.mappings import layer_units
from dse.net.graph import LayerGraph
from dse.objectives import OBJECTIVES
from dse.platform import Platform
from models_analytical.coefficients import OP_CLASSES, WEIGHT_CLASSES, Coefficients, port_key
from models_analytical.conditions import Conditions, scaled_table
from models_analytical.layer_costs import CONV_OPS, LayerTables, layer_tables
from models_analytical.schedule import KernelInputs, ScheduleResult, input_csr, simulate
from models_analytical.threads import ThreadTuner

MB = 1e6
#: Batches smaller than this run on one thread: waking a thread pool costs more than it saves,
#: and on a busy machine far more (``docs/results/performance.md``, "The model's threads").
PARALLEL_MIN_BATCH = 256


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
    segments: np.ndarray  # int [P, D] sub-models the runtime cuts each device's work into
    span_s: np.ndarray  # [P, D] the device's first step of an inference to its last work,
    # waits included (the least time between inferences on it: ScheduleResult.span_s)

    @cached_property
    def feasible(self) -> np.ndarray:
        return np.asarray((self.memory_mb <= self.capacity_mb).all(axis=1))  # bool [P]

    def constraints(self) -> np.ndarray:
        """pymoo-style G <= 0: memory over capacity, relative, per device."""
        return self.memory_mb / self.capacity_mb - 1.0

    def prediction(self, platform: Platform, index: int = 0) -> Prediction:
        """Mapping ``index`` as plain numbers (ms, MB, J) on the devices it uses, with every
        objective (:mod:`dse.objectives`): what ``dse.evaluate`` prints and a deployment's
        measurements are compared with."""
        used = [d for d in range(len(platform)) if self.used[index, d]]
        keys = platform.keys

        def per_device(values: np.ndarray, scale: float = 1.0, digits: int = 4) -> dict:
            return {keys[d]: round(float(values[index, d]) * scale, digits) for d in used}

        return Prediction(
            latency_ms=round(float(self.latency_s[index]) * 1e3, 4),
            memory_mb=per_device(self.memory_mb, digits=3),
            energy_j=per_device(self.energy_j, digits=5),
            feasible=bool(self.feasible[index]),
            compute_ms=per_device(self.busy_s, 1e3),
            communication_ms=per_device(self.comm_s, 1e3),
            idle_ms=per_device(self.idle_s, 1e3),
            bytes_sent=per_device(self.bytes_sent, digits=0),
            capacity_mb={keys[d]: platform.devices[d].memory_mb for d in used},
            objectives={
                o.column: round(float(o.values(self)[index]), 6) for o in OBJECTIVES.values()
            },
        )


@dataclass(frozen=True)
class Prediction:
    """What the model predicts of one mapping, per device by its platform key (a record:
    :mod:`dse.records`)."""

    latency_ms: float
    memory_mb: dict[str, float]
    energy_j: dict[str, float]
    feasible: bool
    compute_ms: dict[str, float]
    communication_ms: dict[str, float]
    idle_ms: dict[str, float]
    bytes_sent: dict[str, float]
    capacity_mb: dict[str, float]
    objectives: dict[str, float]  # by objective column (dse.objectives): latency_ms, ...


def kernel_inputs(
    graph: LayerGraph, platform: Platform, coefficients: Coefficients, tables: LayerTables
) -> KernelInputs:
    """The kernel's read-only arrays for one (graph, platform, coefficients)."""
    n = len(graph)
    in_ptr, in_src, in_tensor, in_bytes = input_csr(
        graph.edge_src, graph.edge_dst, graph.edge_tensor, graph.edge_bytes, n
    )
    last_use = np.arange(n, dtype=np.int64)
    read = graph.edge_src >= 0
    np.maximum.at(last_use, graph.edge_src[read], graph.edge_dst[read])
    outputs = {graph.producer[t.name] for t in graph.outputs if t.name in graph.producer}
    last_use[list(outputs)] = n - 1
    links = platform.link_arrays()
    # consumers of each layer (CSR) and each layer's output tensor id, for the all-gather rule
    read = graph.edge_src >= 0
    order = np.lexsort((graph.edge_dst[read], graph.edge_src[read]))
    src, dst = graph.edge_src[read][order], graph.edge_dst[read][order]
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(out_ptr, src + 1, 1)
    out_tid = np.full(n, -1, dtype=np.int64)
    has = in_src >= 0
    out_tid[in_src[has]] = in_tensor[has]
    is_output = np.zeros(n, dtype=np.bool_)
    is_output[list(outputs)] = True
    return KernelInputs(
        device_type=np.array(
            [coefficients.index(d.type) for d in platform.devices], dtype=np.int64
        ),
        host=np.unique([d.host for d in platform.devices], return_inverse=True)[1].astype(np.int64),
        entry=int(platform.entry),
        streamed=platform.weights == "streamed",
        t_work=tables.t_work,
        t_fixed=tables.t_fixed,
        op_class=tables.op_class,
        out_bytes=tables.out_bytes,
        weight_bytes=tables.weight_bytes,
        channels=graph.out_channels.astype(np.float64),
        channel_block=tables.block,
        part_fixed=tables.part_fixed,
        in_ptr=in_ptr,
        in_src=in_src,
        in_tensor=in_tensor,
        in_bytes=in_bytes,
        last_use=last_use,
        out_ptr=np.cumsum(out_ptr),
        out_dst=dst.astype(np.int64),
        out_tid=out_tid,
        is_output=is_output,
        follows=np.asarray(graph.follows, dtype=np.int64),
        follower=np.asarray(graph.follower, dtype=np.int64),
        split_index=split_index(graph),
        row_chain=np.asarray(graph.row_chain, dtype=np.bool_),
        row_join=np.asarray(graph.row_join, dtype=np.bool_),
        row_stride=np.asarray(graph.row_stride, dtype=np.int64),
        row_span=np.asarray(graph.row_span, dtype=np.int64),
        row_pad=np.asarray(graph.row_pad, dtype=np.int64),
        row_transposed=np.asarray(graph.row_transposed, dtype=np.bool_),
        in_rows=np.asarray(graph.in_rows, dtype=np.int64),
        out_rows=np.asarray(graph.out_rows, dtype=np.int64),
        row_fixed=tables.row_fixed,
        link_latency_s=links["latency"],
        link_s_per_byte=links["inv_bw"],
        link_j_per_byte=links["energy"],
        queue_send=links["queue_send"],
        queue_recv=links["queue_recv"],
        n_queues=int(max(links["queue_send"].max(), links["queue_recv"].max())) + 1,
        **link_tables(platform, coefficients),
        power_w=type_power(coefficients, OP_CLASSES),
        overhead_power_w=type_power(coefficients, ("overhead",)).ravel(),
        transfer_fixed_s=per_type(coefficients, "transfer_fixed_s"),
        transfer_per_byte_s=per_type(coefficients, "transfer_per_byte_s"),
        transfer_per_byte_same_host_s=per_type(coefficients, "same_host_per_byte_s"),
        split_work_factor=per_type(coefficients, "split_work_factor"),
        shared_host_factor=per_type(coefficients, "shared_host_factor"),
        segment_run_s=per_type(coefficients, "segment_run_s"),
        segment_in_per_byte_s=per_type(coefficients, "segment_in_per_byte_s"),
        segment_out_per_byte_s=per_type(coefficients, "segment_out_per_byte_s"),
        receive_on_device=per_type(coefficients, "receive_on_device", np.bool_),
    )


#: The kernel inputs with a row per device type (KernelInputs), and those of them in seconds
#: of a device's own work (what a device's speed divides).
PER_TYPE = (
    "t_work",
    "t_fixed",
    "channel_block",
    "part_fixed",
    "row_fixed",
    "power_w",
    "overhead_power_w",
    "transfer_fixed_s",
    "transfer_per_byte_s",
    "transfer_per_byte_same_host_s",
    "split_work_factor",
    "shared_host_factor",
    "segment_run_s",
    "segment_in_per_byte_s",
    "segment_out_per_byte_s",
    "receive_on_device",
)
PER_TYPE_SECONDS = (
    "t_work",
    "t_fixed",
    "segment_run_s",
    "segment_in_per_byte_s",
    "segment_out_per_byte_s",
)


def split_index(graph: LayerGraph) -> np.ndarray:
    """int64 [L]: each layer's index among the splittable ones (-1: not splittable)."""
    out = np.full(len(graph), -1, dtype=np.int64)
    out[graph.split_layers] = np.arange(len(graph.split_layers))
    return out


def per_type(coefficients: Coefficients, name: str, dtype: type = np.float64) -> np.ndarray:
    """[Y] coefficient ``name`` of each device type (the order of ``coefficients.types``)."""
    return np.array([getattr(c, name) for c in coefficients.types.values()], dtype=dtype)


def type_power(coefficients: Coefficients, classes: tuple[str, ...]) -> np.ndarray:
    """[Y, len(classes)] W each device type draws in each of ``classes`` (``power_w`` keys)."""
    # TypedDicts keyed by power class
    power = [cast("Mapping[str, float]", c.power_w) for c in coefficients.types.values()]
    return np.array([[p[k] for k in classes] for p in power])


def link_tables(
    platform: Platform, coefficients: Coefficients, conditions: Conditions | None = None
) -> dict[str, np.ndarray]:
    """The measured link tables the platform's device pairs use (``link_table`` -1 where a pair's
    link class has none), padded to one length by extending each table's last slope. A table is
    per link class: where one is measured it gives the time of every pair of the class, a
    switched network's port figures included (its queues stay the ports'). On a switched
    network whose boards' ports were measured (``port:BOARD``), a pair of boards takes the
    slower of its two ports' times at each size instead. Under ``conditions`` each port's table
    is scaled by its port's factor before the slower is taken, and a class's table by its
    pair's factor (:class:`~models_analytical.conditions.Conditions`)."""
    tables = {c: (list(t["bytes"]), list(t["seconds"])) for c, t in coefficients.links.items()}
    n = len(platform.devices)
    under = conditions or Conditions()
    factors = under.pair_factors(platform)
    key = [[""] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            cls, factor = platform.link_class(a, b) if a != b else "", float(factors[a, b])
            if cls == "network" and platform.network == "switched":
                boards = sorted({platform.devices[d].host for d in (a, b)})
                if all(port_key(h) in tables for h in boards):
                    each = [(port_key(h), under.port_factor(h)) for h in boards]
                    cls, factor = "|".join(scaled_name(*p) for p in each), 1.0
                    if cls not in tables:
                        tables[cls] = slower(*(scaled_table(tables[p], f) for p, f in each))
            if cls in tables and factor != 1.0:
                scaled = scaled_name(cls, factor)
                tables.setdefault(scaled, scaled_table(tables[cls], factor))
                cls = scaled
            key[a][b] = cls if cls in tables else ""
    names = sorted(tables)
    cls_of = np.full((n, n), -1, dtype=np.int64)
    for a in range(n):
        for b in range(n):
            if key[a][b]:
                cls_of[a, b] = names.index(key[a][b])
    g = max((len(tables[c][0]) for c in names), default=2)
    xs, ys = np.ones((max(len(names), 1), g)), np.zeros((max(len(names), 1), g))
    xs[:, 1] = 2.0
    for i, c in enumerate(names):
        x, y = list(tables[c][0]), list(tables[c][1])
        if len(x) == 1:
            x, y = [x[0], 2 * x[0]], [y[0], y[0]]
        while len(x) < g:
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
            x.append(2 * x[-1])
            y.append(y[-1] + slope * (x[-1] - x[-2]))
        xs[i], ys[i] = x, y
    return {"link_table": cls_of, "table_bytes": xs, "table_s": ys}


def scaled_name(table: str, factor: float) -> str:
    """The name of ``table`` at ``factor`` times its bandwidth (the table's own at 1)."""
    return table if factor == 1.0 else f"{table}*{factor!r}"


def slower(*tables: tuple[list[float], list[float]]) -> tuple[list[float], list[float]]:
    """At each size of any of ``tables`` ((bytes, seconds), bytes increasing), the largest of
    their times (each interpolated on its own sizes; one port: that port's table)."""
    x = sorted({b for t in tables for b in t[0]})
    y = np.max([np.interp(x, t[0], t[1]) for t in tables], axis=0)
    return [float(b) for b in x], [float(t) for t in y]


class AnalyticalModel:
    """Evaluates mapping batches of one graph on one platform; build once, call often."""

    def __init__(
        self,
        graph: LayerGraph,
        platform: Platform,
        coefficients: Coefficients,
        threads: int | None = None,
    ) -> None:
        """``threads``: the kernel's threads for batches of PARALLEL_MIN_BATCH mappings or
        more; None (the default): one or every core, whichever its timings show is faster
        now (:class:`~models_analytical.threads.ThreadTuner`)."""
        coefficients.check_covers(platform)
        # numba.config sets its NUMBA_* names through globals(), unseen by a type checker
        cores = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
        self.tuner = ThreadTuner([1, cores] if threads is None else [min(threads, cores)])
        self._scratch: list = []  # the kernel's working arrays, kept from batch to batch
        self.graph, self.platform, self.coefficients = graph, platform, coefficients
        self.tables: LayerTables = layer_tables(graph, coefficients)
        self.inputs = kernel_inputs(graph, platform, coefficients, self.tables)
        coeff = [coefficients[d.type] for d in platform.devices]  # each device's own
        self._idle_w = np.array([c.power_w["idle"] for c in coeff])
        self._mem_coef = np.array([c.memory.coefficient for c in coeff])
        self._mem_bias = np.array([c.memory.bias_mb for c in coeff])
        self._mem_layer = np.array([c.memory.per_layer_mb for c in coeff])
        conv = np.array([layer.op in CONV_OPS for layer in graph])
        w = self.tables.weight_bytes / MB
        self._w_class = np.stack([np.where(conv, w, 0.0), np.where(conv, 0.0, w)], axis=1)
        self._mem_w = np.array(
            [[c.memory.weights.get(k, 0.0) for k in WEIGHT_CLASSES] for c in coeff]
        )
        self._mem_load = np.array(
            [[c.memory.loading.get(k, 0.0) for k in WEIGHT_CLASSES] for c in coeff]
        )
        self._by_class = platform.weights == "resident" and bool(self._mem_w.any())
        self._mem_segment = np.array([c.memory.per_segment_mb for c in coeff])
        self._mem_empty = np.array(
            [c.memory.bias_mb if c.memory.empty_mb is None else c.memory.empty_mb for c in coeff]
        )
        self._mem_held = np.array(
            [c.memory.coefficient if c.memory.held is None else c.memory.held for c in coeff]
        )
        self._need_weights = self._by_class or bool(self._mem_load.any())
        self.capacity_mb = np.array([d.memory_mb for d in platform.devices])
        self._units = layer_units(graph)
        #: what the hardware runs under against the figures (:meth:`under`)
        self.conditions = Conditions()
        self._s_per_byte = self.inputs.link_s_per_byte  # the links' own, under no conditions

    def with_transfer_costs(
        self, fixed_s: float, per_byte_s: float, per_byte_same_host_s: float | None = None
    ) -> AnalyticalModel:
        """This model with another cost of a tensor crossing devices (every type's
        ``transfer_fixed_s``, ``transfer_per_byte_s`` and ``transfer_per_byte_same_host_s``,
        None: as ``per_byte_s``), built without redoing its tables: what calibration tries
        while it fits those costs."""
        other = copy.copy(self)
        k = len(self.inputs.transfer_fixed_s)
        same = per_byte_s if per_byte_same_host_s is None else per_byte_same_host_s
        other.inputs = self.inputs._replace(
            transfer_fixed_s=np.full(k, float(fixed_s)),
            transfer_per_byte_s=np.full(k, float(per_byte_s)),
            transfer_per_byte_same_host_s=np.full(k, float(same)),
        )
        return other

    def with_shared_host_factor(self, factor: float) -> AnalyticalModel:
        """This model with every type's ``shared_host_factor`` at ``factor``, built without
        redoing its tables: what calibration evaluates to see which work the factor charges."""
        other = copy.copy(self)
        k = self.inputs.shared_host_factor
        other.inputs = self.inputs._replace(shared_host_factor=np.full_like(k, float(factor)))
        return other

    def with_compute_slower(self, factor: float) -> AnalyticalModel:
        """This model with every device's own work (its layers, its sub-model runs and their
        copies in and out) taking ``factor`` times as long and every transfer as it is: the
        machine running ``factor`` times slower than when it was calibrated, on cores whose
        links keep their rates (how a fidelity run takes the machine's drift out,
        :mod:`dse.fidelity.measure`)."""
        other = copy.copy(self)
        i, f = self.inputs, float(factor)
        other.inputs = i._replace(
            t_work=i.t_work * f,
            t_fixed=i.t_fixed * f,
            segment_run_s=i.segment_run_s * f,
            segment_in_per_byte_s=i.segment_in_per_byte_s * f,
            segment_out_per_byte_s=i.segment_out_per_byte_s * f,
        )
        return other

    def under(self, conditions: Conditions) -> AnalyticalModel:
        """This model with the hardware running under ``conditions`` (a device's speed, the
        network's or a port's bandwidth: :mod:`models_analytical.conditions`), on top of any it
        runs under already (:attr:`conditions`), built without redoing its layer tables: cheap
        enough to call for each re-plan. Each device at another speed gets a device type of its
        own (its type's coefficients, its own work over its speed: its layers, sub-model runs
        and their copies in and out); each link between boards its bandwidth (and its measured
        table's per-byte part) times its factor. Memory does not change. Every factor 1 gives
        the same figures as this model. The copy shares this model's working arrays: evaluate
        one of them at a time."""
        conditions.check(self.platform)
        other = copy.copy(self)
        other.conditions = self.conditions.times(conditions, conditions.name)
        i = self.inputs
        device_type = i.device_type.copy()
        rows: list[tuple[int, float]] = []  # (type, speed) of each type appended
        for d, speed in enumerate(conditions.device_speed(self.platform)):
            if speed != 1.0:
                key = (int(i.device_type[d]), float(speed))
                if key not in rows:
                    rows.append(key)
                device_type[d] = len(i.t_work) + rows.index(key)
        fields: dict[str, Any] = link_tables(self.platform, self.coefficients, other.conditions)
        if rows:
            of, by = np.array([t for t, _ in rows]), np.array([s for _, s in rows])
            for name in PER_TYPE:
                more = getattr(i, name)[of]
                if name in PER_TYPE_SECONDS:
                    more = more / (by[:, None] if more.ndim == 2 else by)
                fields[name] = np.concatenate([getattr(i, name), more])
        other.inputs = i._replace(
            device_type=device_type,
            link_s_per_byte=self._s_per_byte / other.conditions.pair_factors(self.platform),
            **fields,
        )
        return other

    def device_speed(self) -> np.ndarray:
        """[L, D] relative throughput of each device on each layer: 1 / its modelled work time
        (1 where a layer costs no work), for sizing a split layer's parts to its devices."""
        work = self.inputs.t_work[self.inputs.device_type].T  # [L, D]: each device's type
        return np.where(work > 0, 1.0 / np.where(work > 0, work, 1.0), 1.0)

    def evaluate(self, mappings: Mappings) -> Evaluation:
        """The figures of every mapping of the batch."""
        return self._evaluation(self._simulate(mappings))

    def memory_phases(self, mappings: Mappings) -> tuple[np.ndarray, np.ndarray]:
        """Each device's memory (MB, [P, D]) while running and while loading its sub-models
        (NaN where the coefficients have no loading terms), whose larger is ``memory_mb``."""
        result = self._simulate(mappings)
        used = self._used(result)
        running, loading = self._memory(result)
        return np.where(used, running, 0.0), np.where(used, loading, 0.0)

    @staticmethod
    def _used(result: ScheduleResult) -> np.ndarray:
        return (result.parts > 0) | (result.peak_bytes > 0) | (result.held_bytes > 0)

    def _memory(self, result: ScheduleResult) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 4.9 while running, with a per-layer term for the runtime structures each layer
        keeps (a rank that runs no sub-model, it only holds tensors, has a baseline of its
        own), and while loading, where onnxruntime holds weights twice and packs conv weights
        (NaN without loading terms)."""
        parts, segments = result.parts, result.segments
        peak, held, weights = result.peak_bytes, result.held_bytes, result.weights_mb
        bias = np.where(parts > 0, self._mem_bias, self._mem_empty)
        memory = bias + parts * self._mem_layer + segments * self._mem_segment
        memory = memory + (held / MB) * self._mem_held  # buffers kept for good
        if self._by_class:  # resident weights: the liveness peak is weights + activations
            act = np.maximum(peak / MB - weights.sum(axis=2), 0.0)
            memory = memory + act * self._mem_coef + (weights * self._mem_w).sum(axis=2)
        else:
            memory = memory + (peak / MB) * self._mem_coef
        loading = np.full_like(memory, np.nan)
        if self._mem_load.any():
            loading = bias + (weights * self._mem_load).sum(axis=2)
        return memory, loading

    def memory_terms(self, mappings: Mappings) -> dict[str, np.ndarray]:
        """What the memory of each device is made of, before coefficients (each [P, D]):
        ``peak_mb`` the liveness peak of tensors and weights, ``held_mb`` buffers kept for good,
        ``parts`` and ``segments`` it runs, and ``weights_mb`` [P, D, class] it holds. The
        terms calibration fits."""
        result = self._simulate(mappings, with_weights=True)
        return {
            "peak_mb": result.peak_bytes / MB,
            "held_mb": result.held_bytes / MB,
            "parts": result.parts,
            "segments": result.segments,
            "weights_mb": result.weights_mb,
        }

    def _simulate(self, mappings: Mappings, with_weights: bool | None = None) -> ScheduleResult:
        """The kernel's figures (:func:`models_analytical.schedule.simulate`), on one thread for
        small batches and, for large ones, on the count the tuner finds faster now; the weights
        by class when ``with_weights`` (None: when the memory terms need them)."""
        device = np.ascontiguousarray(mappings.device, dtype=np.int64)
        sizes = np.ascontiguousarray(mappings.sizes)
        axis = np.ascontiguousarray(mappings.axis, dtype=np.int8)
        size = len(device)
        large = size >= PARALLEL_MIN_BATCH
        threads = self.tuner.choose() if large else 1
        t0 = time.perf_counter()
        result = simulate(
            device,
            sizes,
            axis,
            self._units,
            self.graph.first_consumer,
            self.graph.first_producer,
            self._w_class,
            self._need_weights if with_weights is None else with_weights,
            self.inputs,
            threads,
            self._scratch,
        )
        if large:
            self.tuner.record(threads, size, time.perf_counter() - t0)
        return result

    def _evaluation(self, result: ScheduleResult) -> Evaluation:
        """The Evaluation of the kernel's figures (its ``weights_mb`` read only when the
        coefficients have weight-class memory terms, the case it is computed in)."""
        latency, busy, segments = result.latency_s, result.busy_s, result.segments
        # a device takes part when it computes, or only holds tensors (the entry device of the
        # input image, a device that gathers the parts of a channel-local layer it owns): the
        # runtime runs a rank there too
        used = self._used(result)
        idle = np.where(used, np.maximum(latency[:, None] - busy, 0.0), 0.0)
        energy = result.energy_j + idle * self._idle_w
        # the peak RSS: the larger of the running footprint and the loading one
        memory = np.where(used, np.fmax(*self._memory(result)), 0.0)
        return Evaluation(
            latency_s=latency,
            busy_s=busy,
            comm_s=result.comm_s,
            idle_s=idle,
            memory_mb=memory,
            energy_j=energy,
            bytes_sent=result.bytes_sent,
            used=used,
            capacity_mb=self.capacity_mb,
            segments=segments,
            span_s=result.span_s,
        )
