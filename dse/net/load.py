"""Resolve the `net` config (a zoo name or an ONNX path) to a :class:`Net`: graph + ONNX model."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import onnx
from omegaconf import DictConfig, OmegaConf

from dse.errors import DseError
from dse.net import zoo
from dse.net.build import build_graph
from dse.net.graph import LayerGraph
from dse.net.onnx_load import Budget, InputShape, fix_input_shapes, read_model
from dse.net.order import memory_aware_order, peak_memory
from dse.values import number

ONNX = "onnx"


def net_choices() -> list[str]:
    return [*zoo.NETS, ONNX]


@dataclass(frozen=True)
class Net:
    """A loaded network: its layer graph and the ONNX model it came from.

    ``model`` is the graph as read, input shapes fixed, *without* weight data (zoo nets are
    hollow; a file's external data stays on disk). Every layer names its node by position in
    ``model.graph.node`` (``Layer.node``), so a partitioner can cut :meth:`weighted_model`,
    which has the same nodes in the same order, by a mapping.
    """

    graph: LayerGraph
    model: onnx.ModelProto
    name: str  # zoo name, or the file's stem
    path: Path | None  # the ONNX file (None for zoo nets)
    input_shape: InputShape = None

    def weighted_model(self, seed: int = 0) -> onnx.ModelProto:
        """The model with its weights: the user's (external data included) or, for a zoo net,
        seeded ones (:func:`dse.net.zoo.materialize`)."""
        source = self.path if self.path is not None else zoo.materialize(self.name, seed)
        model = onnx.load(str(source), load_external_data=True)
        fix_input_shapes(model, self.input_shape)
        return model

    @cached_property
    def fingerprint(self) -> str:
        """A content hash of the graph as loaded (nodes, shapes, no weight data)."""
        h = hashlib.sha256()
        for node in self.model.graph.node:
            h.update(node.SerializeToString(deterministic=True))
        for layer in self.graph:
            h.update(f"{layer.name}:{layer.output_shape}".encode())
        return h.hexdigest()[:16]


def load_net(net: DictConfig | Mapping[str, Any] | None) -> Net:
    """Load ``net`` (``{name, path?, input_shape?, order?}``): its layer graph and model."""
    if net is None:
        raise DseError(
            "no network given: add +net=NAME with NAME one of "
            f"{', '.join(net_choices())} (+net=onnx net.path=model.onnx for a file)"
        )
    if isinstance(net, DictConfig):
        if OmegaConf.is_missing(net, "path"):
            raise DseError("+net=onnx needs the model file: add net.path=/path/to/model.onnx")
        net = cast("dict[str, Any]", OmegaConf.to_container(net, resolve=True))  # a mapping
    if not isinstance(net, Mapping):
        raise DseError(f"net must be a mapping such as {{name: alexnet}}, not {net!r}")
    name = str(net.get("name", ""))
    input_shape = net.get("input_shape")
    path = net.get("path")
    order = str(net.get("order", "memory"))
    if order not in ("memory", "file"):
        raise DseError(f"net.order must be memory or file, not '{order}'")
    budget = Budget(
        number(net.get("measure_mb", Budget.memory_mb), "net.measure_mb", positive=True),
        number(net.get("measure_seconds", Budget.seconds), "net.measure_seconds", positive=True),
    )
    if name == ONNX or path:
        if not path:
            raise DseError("+net=onnx needs the model file: add net.path=/path/to/model.onnx")
        try:
            p = Path(str(path)).expanduser().resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            raise DseError(f"cannot read net.path {path!r}: {exc} (check the path)") from None
        model = read_model(p)
        fix_input_shapes(model, input_shape)
        graph = build_graph(model, p.stem, base_dir=p.parent, budget=budget)
        name, source = p.stem, p
    else:
        model = zoo.build(name)
        fix_input_shapes(model, input_shape)
        graph = build_graph(model, name)
        source = None
    if order == "memory":
        graph = with_memory_aware_order(graph)
    return Net(graph, model, name, source, input_shape)


def with_memory_aware_order(graph: LayerGraph) -> LayerGraph:
    """The graph in a memory-aware execution order, where that lowers the activation peak."""
    order = memory_aware_order(graph)
    if peak_memory(graph, order) < peak_memory(graph, range(len(graph))):
        return graph.reordered(order)
    return graph
