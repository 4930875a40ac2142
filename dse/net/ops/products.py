"""Products: convolutions, matrix products, recurrent layers; the layers that split by channels."""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto, helper

from dse.errors import DseError
from dse.net.ops import (
    ChannelSplit,
    LayerLike,
    OpView,
    Part,
    RowWindow,
    Shape,
    family_of,
    numel,
    register,
    window_rows,
)

CONV_OPS = ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose")


def _attrs(node: NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# --- convolutions ---------------------------------------------------------------------------


def is_winograd(layer: LayerLike) -> bool:
    """A 3x3, stride-1, undilated, not depthwise convolution: what runtimes run as Winograd."""
    if layer.op not in ("Conv", "ConvInteger", "QLinearConv") or not layer.weights:
        return False
    w = layer.weights[0].shape
    strides = layer.attrs.get("strides", [1] * (len(w) - 2))
    dilations = layer.attrs.get("dilations", [1] * (len(w) - 2))
    return (
        tuple(w[2:]) == (3, 3)
        and all(s == 1 for s in strides)
        and all(d == 1 for d in dilations)
        and w[1] > 1
    )


def conv_family(layer: LayerLike) -> str:
    groups = int(layer.attrs.get("group", 1))
    if groups > 1:  # depthwise: a group per input channel (weight [C_out, 1, k, k])
        depthwise = bool(layer.weights) and layer.weights[0].shape[1] == 1
        return "conv_depthwise" if depthwise else "conv_grouped"
    if layer.weights and tuple(layer.weights[0].shape[2:]) == (1, 1):
        return "conv_1x1"
    return "conv_winograd" if is_winograd(layer) else "conv"


def conv_part(
    node: NodeProto,
    layer: str,
    part: tuple[int, int],
    tag: str,
    out: str,
    shapes: dict[str, Shape],
    c_in: int,
) -> Part:
    """Output channels [c0, c1) of a Conv or ConvTranspose. With groups, each run of whole
    groups is one grouped convolution over its input channels and a partly covered group one
    convolution of its own; the pieces are concatenated."""
    c0, c1 = part
    op, inputs = node.op_type, list(node.input)
    x, w = inputs[0], inputs[1]
    attrs = [a for a in node.attribute if a.name != "group"]
    groups = int(_attrs(node).get("group", 1))
    has_bias = len(inputs) > 2 and bool(inputs[2])
    w_shape = shapes[w]
    m = w_shape[0] if op == "Conv" else w_shape[1] * groups  # output channels
    per_out, per_in = m // groups, c_in // groups
    pieces = _pieces(c0, c1, groups, per_out)
    p = Part()
    outs = []
    for i, (g0, g1, o0, o1) in enumerate(pieces):
        sub = f"{tag}.{i}" if len(pieces) > 1 else tag
        piece_out = f"{out}.{i}" if len(pieces) > 1 else out
        n_groups = g1 - g0 if _whole((g0, g1, o0, o1), per_out) else 1
        x_in = x
        if groups > 1:
            x_in = f"{x}@{layer}{sub}"
            names = [f"{x_in}.{k}" for k in ("starts", "ends", "axes")]
            for nm, v in zip(names, (g0 * per_in, g1 * per_in, 1), strict=True):
                p.constants[nm] = np.array([v], dtype=np.int64)
            p.nodes.append(
                helper.make_node("Slice", [x, *names], [x_in], name=f"{layer}{sub}.slice")
            )
        wname = f"{w}@{layer}{sub}"
        if op == "Conv":
            p.weights[wname] = (w, ((0, o0, o1),))
        else:  # ConvTranspose: W[C_in, M/group, ...]; this piece's input rows, its output columns
            rows = (0, g0 * per_in, g1 * per_in)
            if n_groups == g1 - g0 and (o1 - o0) == (g1 - g0) * per_out:
                p.weights[wname] = (w, (rows,))
            else:
                lo = o0 - g0 * per_out
                p.weights[wname] = (w, (rows, (1, lo, lo + (o1 - o0))))
        new_inputs = [x_in, wname]
        if has_bias:
            bname = f"{inputs[2]}@{layer}{sub}"
            p.weights[bname] = (inputs[2], ((0, o0, o1),))
            new_inputs.append(bname)
        n = helper.make_node(op, new_inputs, [piece_out], name=f"{layer}{sub}")
        n.attribute.extend(attrs)
        if n_groups > 1:
            n.attribute.append(helper.make_attribute("group", n_groups))
        p.nodes.append(n)
        outs.append(piece_out)
    if len(outs) > 1:
        p.nodes.append(helper.make_node("Concat", outs, [out], axis=1, name=f"{layer}{tag}"))
    return p


def _pieces(c0: int, c1: int, groups: int, per_out: int) -> list[tuple[int, int, int, int]]:
    """(first group, end group, first output channel, end output channel) of each piece of
    channels [c0, c1): runs of whole groups, and partly covered groups alone."""
    if groups == 1:
        return [(0, 1, c0, c1)]
    pieces: list[tuple[int, int, int, int]] = []
    g = c0 // per_out
    while g * per_out < c1:
        o0, o1 = max(c0, g * per_out), min(c1, (g + 1) * per_out)
        whole = o0 == g * per_out and o1 == (g + 1) * per_out
        if whole and pieces and pieces[-1][3] == o0 and _whole(pieces[-1], per_out):
            pg0, _, po0, _ = pieces[-1]
            pieces[-1] = (pg0, g + 1, po0, o1)
        else:
            pieces.append((g, g + 1, o0, o1))
        g += 1
    return pieces


def _whole(piece: tuple[int, int, int, int], per_out: int) -> bool:
    g0, g1, o0, o1 = piece
    return o0 == g0 * per_out and o1 == g1 * per_out


def conv_rows(layer: LayerLike) -> RowWindow | None:
    """A 2-D convolution's row window (any group count: depthwise included)."""
    if not layer.weights or len(layer.weights[0].shape) != 4:
        return None
    return window_rows(layer, layer.weights[0].shape[2])


@register("Conv", family=conv_family, channels=ChannelSplit(1, 1, conv_part), rows=conv_rows)
@register("ConvInteger", "QLinearConv", family=conv_family)  # the runtime cannot slice them
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


def conv_transpose_rows(layer: LayerLike) -> RowWindow | None:
    """A 2-D transposed convolution's row window, where a band fits: explicit pads (no
    ``auto_pad``, no ``output_shape``), and a kernel spanning at least its stride (every
    output row then reads an input row; a band's own padding never goes below zero)."""
    out = getattr(layer, "output_shape", ())
    inputs = getattr(layer, "inputs", ())
    if not layer.weights or len(layer.weights[0].shape) != 4 or len(out) != 4:
        return None
    if not inputs or len(inputs[0].shape) != 4:
        return None
    a = layer.attrs
    auto = a.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto != "NOTSET" or a.get("output_shape"):
        return None
    stride = int((a.get("strides") or [1, 1])[0])
    dilation = int((a.get("dilations") or [1, 1])[0])
    span = (int(layer.weights[0].shape[2]) - 1) * dilation + 1
    pad = int((a.get("pads") or [0, 0, 0, 0])[0])
    if stride < 1 or span < stride or pad < 0:
        return None
    return RowWindow(stride, span, pad, transposed=True)


@register(
    "ConvTranspose",
    family=family_of("conv_transpose"),
    channels=ChannelSplit(1, 1, conv_part),
    rows=conv_transpose_rows,
)
def _conv_transpose(v: OpView) -> int:
    # every input element is multiplied into a (Cout/groups) x k... patch of the output
    x, w = v.in_shapes[0], v.in_shapes[1]
    if x is None or w is None:
        raise ValueError("ConvTranspose shapes unknown")
    return numel(x) * math.prod(w[1:])


# --- matrix products ------------------------------------------------------------------------


def matmul_part(
    node: NodeProto,
    layer: str,
    part: tuple[int, int],
    tag: str,
    out: str,
    shapes: dict[str, Shape],
    c_in: int,
) -> Part:
    """Output features [c0, c1) of a Gemm (W[N, K] with transB, else W[K, N]; a bias of N
    features cut too) or a MatMul (W[..., K, N])."""
    c0, c1 = part
    op, inputs = node.op_type, list(node.input)
    w = inputs[1]
    w_dims = shapes[w]
    axis = (0 if _attrs(node).get("transB", 0) else 1) if op == "Gemm" else len(w_dims) - 1
    p = Part()
    wname = f"{w}@{layer}{tag}"
    p.weights[wname] = (w, ((axis, c0, c1),))
    new_inputs = [inputs[0], wname]
    if op == "Gemm" and len(inputs) > 2 and inputs[2]:
        c_dims = shapes[inputs[2]]
        n_out = w_dims[axis]
        if c_dims and c_dims[-1] == n_out and n_out > 1:
            cname = f"{inputs[2]}@{layer}{tag}"
            p.weights[cname] = (inputs[2], ((len(c_dims) - 1, c0, c1),))
            new_inputs.append(cname)
        else:
            p.keep.append(inputs[2])
            new_inputs.append(inputs[2])
    n = helper.make_node(op, new_inputs, [out], name=f"{layer}{tag}")
    n.attribute.extend(node.attribute)
    p.nodes.append(n)
    return p


@register("Gemm", family=family_of("fc"), channels=ChannelSplit(1, -1, matmul_part))
def _gemm(v: OpView) -> int:
    a = v.in_shapes[0]
    if a is None:
        raise ValueError("Gemm input shape unknown")
    k = a[0] if v.attr("transA", 0) else a[1]
    return numel(v.out_shapes[0]) * k


@register("MatMul", family=family_of("fc"), channels=ChannelSplit(1, -1, matmul_part))
@register("MatMulInteger", "QLinearMatMul", family=family_of("fc"))  # not sliced by the runtime
def _matmul(v: OpView) -> int:
    a = v.in_shapes[0]
    if a is None:
        raise ValueError("MatMul input shape unknown")
    return numel(v.out_shapes[0]) * a[-1]


@register("LSTM", "GRU", "RNN", family=family_of("fc"))
def _recurrent(v: OpView) -> int:
    # every step of every sequence multiplies the input by W and the state by R (all gates
    # and directions are in W [dirs, gates*H, I] and R [dirs, gates*H, H])
    x, w, r = v.in_shapes[0], v.in_shapes[1], v.in_shapes[2]
    if x is None or w is None or r is None:
        raise ValueError("recurrent shapes unknown")
    return x[0] * x[1] * (numel(w) + numel(r))


@register("Einsum", family=family_of("fc"))
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
