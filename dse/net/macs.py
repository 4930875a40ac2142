"""Multiply-accumulate counts per ONNX op type: one rule per op, in a registry.

A rule receives an :class:`OpView` (attributes and static input/output shapes of one node)
and returns the node's MACs. Conventions, chosen to match the usual published counts:

* Convolutions and matrix products count one MAC per multiply-add of the product; bias
  additions are not counted.
* Pooling counts one MAC per element of every window (window size per output element);
  global pooling one per input element.
* Elementwise ops, activations, normalisations and Softmax count one per output element
  (BatchNormalization folds to one multiply-add per element at inference); LRN counts its
  window size per element.
* Data movement (Concat, Reshape, Flatten, Transpose, Slice, Pad, Gather, ...) is free.

An op with no rule is estimated as one MAC per output element and flagged as estimated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dse.errors import DseError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpView:
    """What a MAC rule may read about one node."""

    op: str
    attrs: dict[str, Any]
    in_shapes: Sequence[Shape | None]
    out_shapes: Sequence[Shape]
    in_static: Sequence[bool] = field(default_factory=tuple)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


MacRule = Callable[[OpView], int]
RULES: dict[str, MacRule] = {}


def rule(*ops: str) -> Callable[[MacRule], MacRule]:
    """Register a MAC rule for one or more op types."""

    def register(fn: MacRule) -> MacRule:
        for op in ops:
            RULES[op] = fn
        return fn

    return register


def numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


def count_macs(view: OpView) -> tuple[int, bool]:
    """MACs of a node and whether they were estimated (no rule for its op)."""
    fn = RULES.get(view.op)
    if fn is None:
        return sum(numel(s) for s in view.out_shapes), True
    return int(fn(view)), False


# --- products -----------------------------------------------------------------------------


@rule("Conv", "ConvInteger", "QLinearConv")
def _conv(v: OpView) -> int:
    # weight is input 1 for Conv/ConvInteger, input 3 for QLinearConv: [Cout, Cin/groups, k...]
    x = v.in_shapes[0]
    w = v.in_shapes[3 if v.op == "QLinearConv" else 1]
    if x is None or w is None:
        raise ValueError("Conv shapes unknown")
    group = int(v.attr("group", 1))
    if len(x) < 2 or x[1] != w[1] * group:
        raise DseError(
            f"inconsistent model: a Conv receives {x[1] if len(x) > 1 else '?'} input "
            f"channels but its weight {list(w)} with group={group} expects "
            f"{w[1] * group}"
        )
    return numel(v.out_shapes[0]) * math.prod(w[1:])


@rule("ConvTranspose")
def _conv_transpose(v: OpView) -> int:
    # every input element is multiplied into a (Cout/groups) x k... patch of the output
    x, w = v.in_shapes[0], v.in_shapes[1]
    if x is None or w is None:
        raise ValueError("ConvTranspose shapes unknown")
    return numel(x) * math.prod(w[1:])


@rule("Gemm")
def _gemm(v: OpView) -> int:
    a = v.in_shapes[0]
    if a is None:
        raise ValueError("Gemm input shape unknown")
    k = a[0] if v.attr("transA", 0) else a[1]
    return numel(v.out_shapes[0]) * k


@rule("MatMul", "MatMulInteger", "QLinearMatMul")
def _matmul(v: OpView) -> int:
    a = v.in_shapes[0]
    if a is None:
        raise ValueError("MatMul input shape unknown")
    return numel(v.out_shapes[0]) * a[-1]


@rule("LSTM", "GRU", "RNN")
def _recurrent(v: OpView) -> int:
    # every step of every sequence multiplies the input by W and the state by R (all gates
    # and directions are in W [dirs, gates*H, I] and R [dirs, gates*H, H])
    x, w, r = v.in_shapes[0], v.in_shapes[1], v.in_shapes[2]
    if x is None or w is None or r is None:
        raise ValueError("recurrent shapes unknown")
    return x[0] * x[1] * (numel(w) + numel(r))


@rule("Einsum")
def _einsum(v: OpView) -> int:
    # product over every distinct index letter (contracted and kept) of its extent
    eq = v.attr("equation", "").replace(" ", "")
    lhs = eq.split("->")[0].split(",")
    extent: dict[str, int] = {}
    for term, shape in zip(lhs, v.in_shapes, strict=False):
        if shape is None or "..." in term:
            return numel(v.out_shapes[0])
        for letter, dim in zip(term, shape, strict=False):
            extent[letter] = max(extent.get(letter, 1), dim)
    return math.prod(extent.values())


# --- pooling ------------------------------------------------------------------------------


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(v: OpView) -> int:
    return numel(v.out_shapes[0]) * math.prod(v.attr("kernel_shape", [1]))


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(v: OpView) -> int:
    return numel(v.in_shapes[0])


@rule(
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
)
def _reduce(v: OpView) -> int:
    return numel(v.in_shapes[0])


# --- per element --------------------------------------------------------------------------


@rule("LRN")
def _lrn(v: OpView) -> int:
    return numel(v.out_shapes[0]) * int(v.attr("size", 1))


@rule(
    # activations
    "Relu",
    "LeakyRelu",
    "PRelu",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Softplus",
    "Softsign",
    "Mish",
    "ThresholdedRelu",
    "Clip",
    # normalisation and softmax
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    # arithmetic and math
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Max",
    "Min",
    "Mean",
    "Sum",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Exp",
    "Log",
    "Erf",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
    # comparisons and selection
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Xor",
    "Where",
    "IsNaN",
    "IsInf",
    # quantisation
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
)
def _per_output_element(v: OpView) -> int:
    return sum(numel(s) for s in v.out_shapes)


@rule("Resize", "Upsample")
def _resize(v: OpView) -> int:
    # taps per output element: 1 (nearest), 2 per resized axis (linear), 4 per axis (cubic)
    mode = v.attr("mode", "nearest")
    if isinstance(mode, bytes):
        mode = mode.decode()
    x, y = v.in_shapes[0], v.out_shapes[0]
    resized = sum(1 for a, b in zip(x or (), y, strict=False) if a != b) or 1
    taps = {"nearest": 1, "linear": 2**resized, "bilinear": 2**resized, "cubic": 4**resized}
    return numel(y) * taps.get(mode, 1)


# --- data movement: free ------------------------------------------------------------------


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Cast", "Dropout")
def _same_elements(v: OpView) -> int:
    # free, but the output holds exactly the input's elements: a Reshape of 48 values to
    # [5, 7] is a broken model, not 35 values
    x = v.in_shapes[0] if v.in_shapes else None
    if x is not None and v.out_shapes and numel(x) != numel(v.out_shapes[0]):
        raise DseError(
            f"inconsistent model: a {v.op} of shape {list(x)} ({numel(x)} values) gives shape "
            f"{list(v.out_shapes[0])} ({numel(v.out_shapes[0])} values)"
        )
    return 0


@rule(
    "Concat",
    "Slice",
    "Split",
    "Gather",
    "GatherElements",
    "GatherND",
    "Pad",
    "CastLike",
    "Expand",
    "Tile",
    "Shape",
    "Size",
    "Constant",
    "ConstantOfShape",
    "Range",
    "DepthToSpace",
    "SpaceToDepth",
    "ScatterND",
    "ScatterElements",
    "Compress",
    "OneHot",
    "EyeLike",
    "Trilu",
    "ReverseSequence",
    "SequenceAt",
    "SplitToSequence",
    "ConcatFromSequence",
)
def _free(v: OpView) -> int:
    return 0
