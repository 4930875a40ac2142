"""Pooling and reductions."""

from __future__ import annotations

import math

from dse.net.ops import OpView, family_of, numel, register


@register("MaxPool", "AveragePool", "LpPool", family=family_of("pool"), local="axis1")
def _pool(v: OpView) -> int:
    return numel(v.out_shapes[0]) * math.prod(v.attr("kernel_shape", [1]))


@register("GlobalAveragePool", "GlobalMaxPool", family=family_of("pool"), local="axis1")
@register("GlobalLpPool", family=family_of("pool"))
def _global_pool(v: OpView) -> int:
    return numel(v.in_shapes[0])


@register(
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ArgMax",
    "ArgMin",
    "TopK",
    "NonZero",
    family=family_of("elementwise"),
)
def _reduce(v: OpView) -> int:
    return numel(v.in_shapes[0])
