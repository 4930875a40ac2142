"""Network zoo: six ImageNet CNNs as hollow ONNX graphs, or materialized with seeded weights."""

from __future__ import annotations

from dse.zoo.builder import NetBuilder
from dse.zoo.materialize import materialize
from dse.zoo.registry import NETS, build

__all__ = ["NETS", "NetBuilder", "build", "materialize"]
