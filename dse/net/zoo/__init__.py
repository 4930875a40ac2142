"""Network zoo: six ImageNet CNNs as hollow ONNX graphs, or materialized with seeded weights."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder
from dse.net.zoo.materialize import materialize
from dse.net.zoo.registry import CALIBRATION_NETS, NETS, build

__all__ = ["CALIBRATION_NETS", "NETS", "NetBuilder", "build", "materialize"]
