"""Per-element ops: activations, normalisations, arithmetic, comparisons, resizing."""

from __future__ import annotations

from dse.net.ops import OpView, family_of, numel, register, same_row

ACT = family_of("activation")  # one tensor in, one out: memory-bound, by bytes moved
ARITH = family_of("arith")  # two or more tensors in (a constant among them), one out
NORM = family_of("norm")
SOFTMAX = family_of("softmax")  # a reduction along an axis, then a pass over it


def _per_output_element(v: OpView) -> int:
    return sum(numel(s) for s in v.out_shapes)


# activations: channel-local whatever the split axis; onnxruntime fuses some into their producer
for _op in ("Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh"):
    register(_op, family=ACT, local="any", fused=True, rows=same_row)(_per_output_element)
register(
    "Clip", family=ACT, local="any", fused=True, not_parameters=frozenset({1, 2}), rows=same_row
)(_per_output_element)
for _op in ("Elu", "Selu", "Celu", "Gelu", "Softplus", "Softsign", "Mish", "ThresholdedRelu"):
    register(_op, family=ACT, local="any", rows=same_row)(_per_output_element)
register("PRelu", family=ACT)(_per_output_element)  # its slope may be per channel: not local

# normalisation and softmax (BatchNormalization folds to one multiply-add per element)
register(
    "BatchNormalization",
    family=NORM,
    local="axis1",
    local_inputs=frozenset({1, 2, 3, 4}),  # scale, bias, mean, var: [C]
    not_parameters=frozenset({3, 4}),  # running statistics, not trained
    fused=True,
    rows=same_row,  # scale, bias, mean and var are [C]
)(_per_output_element)
register("InstanceNormalization", "LayerNormalization", family=NORM)(_per_output_element)
register("GroupNormalization", family=NORM)(_per_output_element)
register("Softmax", "LogSoftmax", "Hardmax", family=SOFTMAX)(_per_output_element)

# arithmetic and math: row-local (a band of their output from the same rows of every input:
# a join on bands, dse.mapping.rows) where no static operand varies along the rows
register("Add", "Sum", "Mul", family=ARITH, fused=True, rows=same_row)(_per_output_element)
register("Sub", "Div", "Pow", "Mod", "Max", "Min", "Mean", family=ARITH, rows=same_row)(
    _per_output_element
)
register(
    "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Floor", "Ceil", "Round", "Sign",
    "Sin", "Cos",
    family=ACT, rows=same_row,
)(_per_output_element)  # fmt: skip

# comparisons, selection and quantisation
register(
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "Where", "IsNaN", "IsInf", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    family=ARITH,
)(_per_output_element)  # fmt: skip


@register("LRN", family=NORM)
def _lrn(v: OpView) -> int:
    return numel(v.out_shapes[0]) * int(v.attr("size", 1))


@register("Resize", family=family_of("resize"), not_parameters=frozenset({1, 2, 3}))
@register("Upsample", family=family_of("resize"), not_parameters=frozenset({1}))
def _resize(v: OpView) -> int:
    # taps per output element: 1 (nearest), 2 per resized axis (linear), 4 per axis (cubic)
    mode = v.attr("mode", "nearest")
    if isinstance(mode, bytes):
        mode = mode.decode()
    x, y = v.in_shapes[0], v.out_shapes[0]
    resized = sum(1 for a, b in zip(x or (), y, strict=False) if a != b) or 1
    taps = {"nearest": 1, "linear": 2**resized, "bilinear": 2**resized, "cubic": 4**resized}
    return numel(y) * taps.get(mode, 1)
