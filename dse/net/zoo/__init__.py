"""Network zoo: six ImageNet CNNs as hollow ONNX graphs, or materialized with seeded weights."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder
from dse.net.zoo.materialize import materialize
from dse.net.zoo.registry import NETS, build

__all__ = ["NETS", "NetBuilder", "build", "materialize"]
