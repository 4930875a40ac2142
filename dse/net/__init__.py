"""Networks: ONNX in -> a layer graph (shapes, MACs, bytes, splittable layers) + its model."""

from __future__ import annotations

from dse.net.load import Net, load_net, net_choices

__all__ = ["Net", "load_net", "net_choices"]
