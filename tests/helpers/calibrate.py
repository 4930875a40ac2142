"""What the calibration tests share: the conv-relu chain on a small platform and on two boards,
one mapping of it, and the localhost platform."""

from __future__ import annotations

import dataclasses

import numpy as np
import yaml

from dse.mapping import Mappings, check
from dse.mapping import whole as whole_on
from dse.net.build import build_graph
from dse.net.graph import LayerGraph
from dse.paths import CONF_DIR
from dse.platform import Device, Link, Platform, load_platform
from models_analytical.coefficients import Coefficients
from models_analytical.model import AnalyticalModel, Evaluation
from tests.helpers.onnx_factory import conv_relu_chain
from tests.helpers.platforms import coefficients, platform


def chain_model(coeff: Coefficients, n_dev: int = 2) -> tuple[LayerGraph, AnalyticalModel]:
    """The conv-relu chain and its model on ``n_dev`` devices over 1 GB/s links."""
    graph = build_graph(conv_relu_chain(), "chain")
    return graph, AnalyticalModel(graph, platform(n_dev, bw=1e9), coeff)


def one_mapping(graph: LayerGraph, n_dev: int, devices=None, sizes=None) -> Mappings:
    """One mapping: layer i on ``devices[i]`` (default: all on device 0), the splittable
    layers given in ``sizes`` (layer index -> channels per device) split so."""
    m = whole_on(graph, n_dev, np.zeros(len(graph), int) if devices is None else devices)
    for layer, per_device in (sizes or {}).items():
        m.sizes[0, int(np.searchsorted(graph.split_layers, layer))] = per_device
    check(graph, n_dev, m)
    return m


def conv1_split(graph: LayerGraph, m: AnalyticalModel, parts: list[float]) -> Evaluation:
    """The chain on device 0 but conv1 (layer 2, 256 channels) split by ``parts`` (shares)
    over two devices: the model's evaluation."""
    c = int(graph.out_channels[2])
    sizes = [round(s * c) for s in parts]
    return m.evaluate(one_mapping(graph, 2, sizes={2: sizes}))


def platform_localhost() -> Platform:
    return load_platform(yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text()))


def board_pair_model(per_byte: float, same_host: float | None, entry: int = 0) -> tuple:
    """The chain on three devices: h0_cpu alone on board h0, h1_cpu0 and h1_cpu1 on board h1
    (1 GB/s between boards, 10 GB/s within one), with cut costs per byte ``per_byte`` and
    ``same_host``, the image entering at device ``entry``; the graph and its model."""
    devices = (
        Device("h0_cpu", "h0", "cpu", 1, 1e4),
        Device("h1_cpu0", "h1", "cpu", 1, 1e4),
        Device("h1_cpu1", "h1", "cpu", 1, 1e4),
    )
    links = {"network": Link(0.0, 1e9), "same_host": Link(0.0, 1e10)}
    cpu = dataclasses.replace(
        coefficients()["cpu"],
        transfer_per_byte_s=per_byte,
        transfer_per_byte_same_host_s=same_host,
    )
    graph = build_graph(conv_relu_chain(), "chain")
    platform = Platform("b", devices, links, entry)
    return graph, AnalyticalModel(graph, platform, Coefficients({"cpu": cpu}))
