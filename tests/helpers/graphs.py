"""Layer graphs of Relu layers and boards joined by 1 MB/s links: schedules worked out by hand."""

from __future__ import annotations

from onnx import helper

import tests.helpers.onnx_factory as f
from dse.net.build import build_graph
from dse.net.graph import LayerGraph
from dse.platform import Device, Link, Platform

MB = 1e6  # every tensor of relus is 1e6 float32: 4 MB, 4 s at 1 MB/s; every Relu 1 s


def relus(edges: list[tuple[str, list[str]]], outputs: list[str]) -> LayerGraph:
    """Relu layers (an Add where a layer has two inputs) of 1e6 elements each, from input x."""
    nodes = [
        helper.make_node("Add" if len(ins) == 2 else "Relu", ins, [name], name=name)
        for name, ins in edges
    ]
    return build_graph(f.model(nodes, {"x": [1_000_000]}, outputs), "g")


def fork_join() -> LayerGraph:
    """a feeds b and c, joined by j."""
    return relus([("a", ["x"]), ("b", ["a"]), ("c", ["a"]), ("j", ["b", "c"])], ["j"])


def relu_chain(n_elems: int, length: int) -> LayerGraph:
    """``length`` Relu layers in a row on a tensor of ``n_elems`` floats, from input t0."""
    nodes = [
        helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(length)
    ]
    return build_graph(f.model(nodes, {"t0": [n_elems]}, [f"t{length}"]), "chain")


def boards(per_board: list[int], network: str = "pairs", **kw) -> Platform:
    """Boards h0, h1, ... with the given number of cpus each; every link 1 MB/s, latency 0,
    unless ``kw`` says otherwise (``links``, ``ports``)."""
    devices = tuple(
        Device(f"h{h}_cpu{i}", f"h{h}", "cpu", 1, 1e4)
        for h, n in enumerate(per_board)
        for i in range(n)
    )
    links = kw.pop("links", {"network": Link(0.0, MB), "same_host": Link(0.0, MB)})
    return Platform("t", devices, links, entry=0, network=network, **kw)
