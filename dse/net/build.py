"""Building a :class:`~dse.net.graph.LayerGraph` from an ONNX model: shapes folded and
inferred (measured by running where inference cannot tell), the model's structure checked, each
compute node measured (MACs, parameters, bytes, how it splits) through the op registry.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto, NodeProto

from dse.errors import DseError
from dse.net import ops
from dse.net.graph import Layer, LayerGraph, Tensor
from dse.net.onnx_load import (
    MAX_DIM,
    Budget,
    TensorType,
    fold_constants,
    graph_inputs,
    infer_types,
    run_for_types,
)
from dse.net.ops import OpView, count_macs

#: Ops whose outputs depend only on input shapes, so they fold once shapes are known.
SHAPE_OPS = frozenset({"Shape", "Size"})
#: Control flow is never folded: its subgraphs may read activations from the outer scope.
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
#: Element types of trained weights (floats, and the 8- and 4-bit types of quantized models);
#: int32/int64 static tensors are shapes, indices or axes.
WEIGHT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.BFLOAT16,
        onnx.TensorProto.INT8,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.INT4,
        onnx.TensorProto.UINT4,
    }
)
#: Largest tensor a layer may read or write (1 TiB): far beyond any edge device, and small
#: enough that byte and MAC counts stay exact in int64.
MAX_TENSOR_BYTES = 2**40
#: Rounds of constant folding and shape inference before shapes are measured by running.
FOLD_ROUNDS = 8
#: Largest MAC count of one layer.
MAX_MACS = 2**62


def build_graph(
    model: ModelProto, name: str, base_dir: Path | None = None, budget: Budget | None = None
) -> LayerGraph:
    """Reduce a model whose inputs have static shapes to its layer graph.

    ``base_dir`` is where external weight data lives; it is needed only when static shape
    inference is incomplete and shapes must be measured by running the model, within
    ``budget`` (memory and time).
    """
    in_file = list(model.graph.node)  # one list: protobuf wrappers are not stable objects
    position = {id(n): i for i, n in enumerate(in_file)}
    _check_structure(model, in_file, name)
    nodes = _topological(in_file)
    names = _node_names(nodes, position)
    types = infer_types(model)
    static = _static_tensors(model, nodes)
    current = model
    for _ in range(FOLD_ROUNDS):
        if not _unknown(nodes, static, types):
            break
        # fold shape computations that static inference could not see through, then retry:
        # each round can size the tensors whose shapes the previous round's folds gave
        folded = fold_constants(current, types)
        if folded is current:
            break
        current = folded
        folded_types = infer_types(folded)
        types = {**types, **{k: v for k, v in folded_types.items() if v is not None}}
    compute = [n for n in nodes if not _is_folded(n, static)]
    if not compute:
        raise DseError(f"model '{name}' has no compute layers (every node is constant)")
    needed = _unknown(nodes, static, types)
    if needed:
        types.update(_measure(model, base_dir, needed, name, types, budget or Budget()))
    g = model.graph

    def tensor(tname: str, activation: bool = True) -> Tensor:
        tt: TensorType | None = types.get(tname)
        if tt is None:
            raise DseError(
                f"model '{name}': the shape of tensor '{tname}' cannot be inferred; "
                "set net.input_shape or export the model with static shapes"
            )
        t = Tensor(tname, tt.shape, tt.itemsize)
        _check_size(t, name, activation)
        return t

    producer: dict[str, int] = {}
    layers: list[Layer] = []
    param_names: set[str] = set()
    for node in compute:
        idx = len(layers)
        acts = [t for t in _all_inputs(node) if t and t not in static]
        weights = [t for t in node.input if t and t in static and types.get(t) is not None]
        in_types = [types.get(t) if t else None for t in node.input]
        outs = [tensor(t) for t in node.output if t]
        view = OpView(
            op=node.op_type,
            attrs={a.name: onnx.helper.get_attribute_value(a) for a in node.attribute},
            in_shapes=[tt.shape if tt is not None else None for tt in in_types],
            out_shapes=[o.shape for o in outs],
            in_static=[bool(t) and t in static for t in node.input],
        )
        try:
            macs, estimated = count_macs(view)
        except DseError as exc:
            raise DseError(f"model '{name}', layer '{names[position[id(node)]]}': {exc}") from None
        except (ValueError, IndexError, TypeError):
            macs, estimated = sum(o.numel for o in outs), True
        if not 0 <= macs <= MAX_MACS:
            raise DseError(
                f"model '{name}', layer '{names[position[id(node)]]}': {macs:.3g} MACs is "
                "beyond any device (check the model's shapes)"
            )
        wts = tuple(tensor(t, activation=False) for t in dict.fromkeys(weights))
        learned = _learned(node, static, types)
        param_names.update(learned)
        splittable, out_channels = _split_info(node, view)
        layers.append(
            Layer(
                index=idx,
                name=names[position[id(node)]],
                op=node.op_type,
                inputs=tuple(tensor(t) for t in dict.fromkeys(acts)),
                outputs=tuple(outs),
                weights=wts,
                macs=int(macs),
                params=sum(w.numel for w in wts if w.name in learned),
                out_channels=out_channels,
                splittable=splittable,
                estimated=estimated,
                node=position[id(node)],
                attrs=view.attrs,
            )
        )
        for t in node.output:
            if t:
                producer[t] = idx

    in_names = {vi.name for vi in graph_inputs(model)}
    for o in g.output:
        if o.name in in_names:
            raise DseError(
                f"model '{name}': graph output '{o.name}' is a graph input, so no layer "
                "computes it; export the model with the outputs of its last layers"
            )
        if o.name not in producer and o.name not in static:
            raise DseError(
                f"model '{name}': graph output '{o.name}' is produced by no node; "
                "export the model with the outputs of its last layers"
            )
    src, dst, nbytes, tnames = [], [], [], []
    for layer in layers:
        for t in layer.inputs:
            if t.name in producer:
                src.append(producer[t.name])
            elif t.name in in_names:
                src.append(-1)
            else:
                raise DseError(
                    f"model '{name}': layer '{layer.name}' reads tensor '{t.name}' "
                    "that no node produces and that is not a graph input"
                )
            dst.append(layer.index)
            nbytes.append(t.nbytes)
            tnames.append(t.name)

    unique: dict[str, Tensor] = {w.name: w for layer in layers for w in layer.weights}
    arrays = [np.asarray(a, dtype=np.int64) for a in (src, dst, nbytes)]
    for a in arrays:
        a.setflags(write=False)
    return LayerGraph(
        name=name,
        layers=tuple(layers),
        inputs=tuple(tensor(vi.name) for vi in graph_inputs(model)),
        outputs=tuple(tensor(o.name) for o in g.output if o.name not in static),
        edge_src=arrays[0],
        edge_dst=arrays[1],
        edge_bytes=arrays[2],
        edge_tensor=tuple(tnames),
        unique_params=sum(w.numel for w in unique.values() if w.name in param_names),
        unique_weight_bytes=sum(w.nbytes for w in unique.values()),
        producer=producer,
    )


def _check_size(t: Tensor, model: str, activation: bool) -> None:
    """One line for a tensor no device could hold, or an activation with no elements."""
    if any(not 0 <= d <= MAX_DIM for d in t.shape) or t.nbytes > MAX_TENSOR_BYTES:
        raise DseError(
            f"model '{model}': tensor '{t.name}' of shape {list(t.shape)} is too large "
            f"({t.nbytes:.3g} bytes; dimensions up to 2^31 - 1): check the model and "
            "net.input_shape"
        )
    if activation and t.numel == 0:
        raise DseError(
            f"model '{model}': tensor '{t.name}' of shape {list(t.shape)} has no elements: "
            "check the model and net.input_shape"
        )


def _check_structure(model: ModelProto, nodes: Sequence[NodeProto], name: str) -> None:
    """One line for a graph no runtime accepts: a tensor written twice, or a graph input,
    weight or a node's own input overwritten."""
    g = model.graph
    if not g.output:
        raise DseError(f"model '{name}' has no graph outputs: export it with its results")
    for kind, listed in (("input", g.input), ("output", g.output), ("weight", g.initializer)):
        seen: set[str] = set()
        for item in listed:
            if item.name in seen:
                raise DseError(
                    f"model '{name}': graph {kind} '{item.name}' is listed twice: "
                    "it is not a valid inference model"
                )
            seen.add(item.name)
    fixed = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    writer: dict[str, str] = {}
    for i, n in enumerate(nodes):
        label = n.name or f"{n.op_type} node {i}"
        for t in n.output:
            if not t:
                continue
            if t in n.input:
                raise DseError(
                    f"model '{name}': node '{label}' reads its own output '{t}' (a cycle): "
                    "it is not a valid inference model"
                )
            if t in fixed:
                raise DseError(
                    f"model '{name}': node '{label}' overwrites '{t}', a graph input or "
                    "weight: it is not a valid inference model"
                )
            if t in writer:
                raise DseError(
                    f"model '{name}': tensor '{t}' is written by two nodes ('{writer[t]}' and "
                    f"'{label}'): it is not a valid inference model"
                )
            writer[t] = label


def _unknown(
    nodes: Sequence[NodeProto], static: set[str], types: dict[str, TensorType | None]
) -> list[str]:
    """Activation tensors of compute nodes whose shapes are not yet known."""
    names = [
        t
        for n in nodes
        if not _is_folded(n, static)
        for t in [*n.input, *n.output]
        if t and t not in static and types.get(t) is None
    ]
    return list(dict.fromkeys(names))


def _learned(node: NodeProto, static: set[str], types: dict[str, TensorType | None]) -> set[str]:
    """Names of a node's trained parameters: its static float or quantized-integer inputs.

    Statistics and settings such as BatchNormalization's running mean and variance or Clip's
    bounds take memory (weight bytes) but are not trained, so they are left out of parameter
    counts, as in the published counts of every BN network.
    """
    names = set()
    for i, t in enumerate(node.input):
        tt = types.get(t) if t else None
        if tt is None or t not in static or tt.elem_type not in WEIGHT_TYPES:
            continue
        if i in ops.not_parameters(node.op_type):
            continue
        names.add(t)
    return names


def _measure(
    model: ModelProto,
    base_dir: Path | None,
    needed: list[str],
    name: str,
    types: Mapping[str, TensorType | None],
    budget: Budget,
) -> dict[str, TensorType]:
    known = sum(
        math.prod(tt.shape) * tt.itemsize
        for t, tt in types.items()
        if tt is not None and t not in {i.name for i in model.graph.initializer}
    )
    how = (
        f"raise net.measure_mb (now {budget.memory_mb:g}) if the model is sound, or export it "
        "with static shapes"
    )
    if known > budget.memory_mb * 2**20:
        raise DseError(
            f"model '{name}': measuring the shapes of {len(needed)} tensors (e.g. "
            f"'{needed[0]}') by running it needs over {known / 2**20:.0f} MB of activations: " + how
        )
    try:
        return run_for_types(model, base_dir, needed, budget)
    except MemoryError:
        raise DseError(
            f"model '{name}': measuring the shapes of {len(needed)} tensors (e.g. "
            f"'{needed[0]}') by running it took more than {budget.memory_mb:g} MB: " + how
        ) from None
    except TimeoutError:
        raise DseError(
            f"model '{name}': measuring the shapes of {len(needed)} tensors (e.g. "
            f"'{needed[0]}') by running it took more than {budget.seconds:g} s: raise "
            f"net.measure_seconds if the model is sound, or export it with static shapes"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any runtime failure means shapes are unknowable
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise DseError(
            f"model '{name}': shapes of {len(needed)} tensors (e.g. '{needed[0]}') "
            f"cannot be inferred, and running the model failed: {first}"
        ) from None


def _all_inputs(node: NodeProto) -> list[str]:
    """Explicit inputs plus outer-scope names read inside control-flow subgraphs."""
    names = list(node.input)
    for attr in node.attribute:
        subgraphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for sg in subgraphs:
            names.extend(_outer_refs(sg))
    return names


def _outer_refs(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    refs: list[str] = []
    for n in graph.node:
        for t in _all_inputs(n):
            if t and t not in local:
                refs.append(t)
        local.update(n.output)
    return refs


def _topological(nodes: list[NodeProto]) -> list[NodeProto]:
    """Kahn's order that keeps the file order wherever the file order is valid."""
    produced = {t: i for i, n in enumerate(nodes) for t in n.output if t}
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        d = {produced[t] for t in _all_inputs(n) if t in produced and produced[t] != i}
        deps.append(d)
        for j in d:
            users[j].append(i)
    indeg = [len(d) for d in deps]
    ready = [i for i, k in enumerate(indeg) if k == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise DseError("the ONNX graph has a cycle: it is not a valid inference model")
    return [nodes[i] for i in order]


def _node_names(nodes: Sequence[NodeProto], position: Mapping[int, int]) -> dict[int, str]:
    """Stable unique layer names by node position: the node name, else '<op>_<k>' counted in
    the (deterministic) topological order, so a reload of the same file gives the same names."""
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    counters: dict[str, int] = {}
    names: dict[int, str] = {}
    for n in nodes:
        base = n.name
        if not base:
            k = counters.get(n.op_type, 0)
            base = f"{n.op_type}_{k}"
            while base in taken:
                k += 1
                base = f"{n.op_type}_{k}"
            counters[n.op_type] = k + 1
        nm, k = base, 1
        while nm in seen:
            nm, k = f"{base}_{k}", k + 1
        seen.add(nm)
        names[position[id(n)]] = nm
    return names


def _static_tensors(model: ModelProto, nodes: Sequence[NodeProto]) -> set[str]:
    """Tensors known before any input arrives: weights and shape computations over them."""
    static = {t.name for t in model.graph.initializer}
    for n in nodes:
        if n.op_type in CONTROL_FLOW_OPS:
            continue
        ins = [t for t in n.input if t]
        if n.op_type in SHAPE_OPS or all(t in static for t in ins):
            static.update(t for t in n.output if t)
    return static


def _is_folded(node: NodeProto, static: set[str]) -> bool:
    return bool(node.output) and all(t in static for t in node.output if t)


def _split_info(node: NodeProto, view: OpView) -> tuple[bool, int]:
    """Whether a layer can be LOP-split by output channel, and its output channels."""
    out = view.out_shapes[0] if view.out_shapes else ()
    spec = ops.channel_split(node.op_type)
    if spec is not None and out:
        const_weight = len(view.in_static) > spec.weight and bool(view.in_static[spec.weight])
        if spec.axis == 1 and len(out) >= 2:
            return const_weight, out[1]
        if spec.axis == -1:
            return const_weight, out[-1]
    return False, (out[1] if len(out) >= 2 else (out[0] if out else 0))
