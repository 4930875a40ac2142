"""Resolve the `net` config (a zoo name or an ONNX path) to a layer graph."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dse import zoo
from dse.errors import DseError
from dse.graph import LayerGraph, build_graph
from dse.onnx_load import fix_input_shapes, read_model
from models_analytical.liveness import memory_aware_order, peak_memory

ONNX = "onnx"


def net_choices() -> list[str]:
    return [*zoo.NETS, ONNX]


def load_net(net: DictConfig | Mapping[str, Any] | None) -> LayerGraph:
    """Build the layer graph of ``net`` (``{name, path?, input_shape?}``)."""
    if net is None:
        raise DseError(
            "no network given: add +net=NAME with NAME one of "
            f"{', '.join(net_choices())} (+net=onnx net.path=model.onnx for a file)"
        )
    if isinstance(net, DictConfig):
        if OmegaConf.is_missing(net, "path"):
            raise DseError("+net=onnx needs the model file: add net.path=/path/to/model.onnx")
        net = OmegaConf.to_container(net, resolve=True)  # type: ignore[assignment]
    assert isinstance(net, Mapping)
    name = str(net.get("name", ""))
    input_shape = net.get("input_shape")
    path = net.get("path")
    order = str(net.get("order", "memory"))
    if order not in ("memory", "file"):
        raise DseError(f"net.order must be memory or file, not '{order}'")
    if name == ONNX or path:
        if not path:
            raise DseError("+net=onnx needs the model file: add net.path=/path/to/model.onnx")
        p = Path(str(path)).expanduser()
        model = read_model(p)
        fix_input_shapes(model, input_shape)
        graph = build_graph(model, p.stem, base_dir=p.parent)
    else:
        model = zoo.build(name)
        fix_input_shapes(model, input_shape)
        graph = build_graph(model, name)
    return with_memory_aware_order(graph) if order == "memory" else graph


def with_memory_aware_order(graph: LayerGraph) -> LayerGraph:
    """The graph in a memory-aware execution order, where that lowers the activation peak."""
    order = memory_aware_order(graph)
    if peak_memory(graph, order) < peak_memory(graph, range(len(graph))):
        return graph.reordered(order)
    return graph
