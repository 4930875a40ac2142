"""Name -> network constructor table, and building a network with its fill plan."""

from __future__ import annotations

from collections.abc import Callable

import onnx

from dse.errors import DseError
from dse.net.zoo.alexnet import alexnet
from dse.net.zoo.builder import Fill, NetBuilder
from dse.net.zoo.densenet import densenet121
from dse.net.zoo.googlenet import googlenet
from dse.net.zoo.mobilenet import mobilenetv2
from dse.net.zoo.opmix import opmix
from dse.net.zoo.resnet import resnet50
from dse.net.zoo.vgg import vgg16

_NETWORKS: dict[str, Callable[[NetBuilder], str]] = {
    "alexnet": alexnet,
    "densenet121": densenet121,
    "googlenet": googlenet,
    "mobilenetv2": mobilenetv2,
    "resnet50": resnet50,
    "vgg16": vgg16,
}
#: The zoo: six classic ImageNet CNNs.
NETS: tuple[str, ...] = tuple(sorted(_NETWORKS))
#: Networks made for calibration to profile beside the zoo (loaded and materialized as zoo
#: networks are, by name): the layers of exported models the zoo lacks.
CALIBRATION_NETS: tuple[str, ...] = ("opmix",)
_NETWORKS["opmix"] = opmix


def network(name: str) -> Callable[[NetBuilder], str]:
    """The constructor of network `name`; DseError if there is none."""
    if name not in _NETWORKS:
        raise DseError(f"unknown network {name!r}: choose one of {', '.join(NETS)}")
    return _NETWORKS[name]


def construct(name: str) -> tuple[onnx.ModelProto, dict[str, Fill]]:
    """The hollow model of network `name` and how to fill each of its initializers."""
    constructor = network(name)
    b = NetBuilder(name)
    return b.model(constructor(b)), b.fills


def build(name: str) -> onnx.ModelProto:
    """The hollow ONNX model of network `name`: initializers have name, dims, type but no data."""
    return construct(name)[0]
