"""Pooling and reductions."""

from __future__ import annotations

import math

from dse.net.ops import LayerLike, OpView, RowWindow, family_of, numel, register, window_rows


def pool_rows(layer: LayerLike) -> RowWindow | None:
    """A 2-D pooling's row window. Not an AveragePool in ceil mode that counts padding: its
    last window's divisor depends on padding a band cannot keep."""
    kernel = layer.attrs.get("kernel_shape") or []
    if len(kernel) != 2:
        return None
    if (
        layer.op == "AveragePool"
        and layer.attrs.get("ceil_mode", 0)
        and layer.attrs.get("count_include_pad", 0)
    ):
        return None
    return window_rows(layer, kernel[0])


@register("MaxPool", "AveragePool", family=family_of("pool"), local="axis1", rows=pool_rows)
@register("LpPool", family=family_of("pool"), local="axis1")
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
    family=family_of("reduce"),
)
def _reduce(v: OpView) -> int:
    return numel(v.in_shapes[0])
