"""NetBuilder: emits hollow ONNX graphs while tracking every tensor's (C, H, W) shape."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8
INPUT = "input"
OUTPUT = "output"

Size = int | tuple[int, int]
Pads = int | tuple[int, int, int, int]
Shape = tuple[int, ...]


class Fill(NamedTuple):
    """How materialize fills one initializer: 'he' (value = fan_in), 'const' (value) or
    'scales' (a Resize's [1, 1, value, value])."""

    kind: str
    value: float


def _pair(v: Size) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _pads(p: Pads) -> tuple[int, int, int, int]:
    """ONNX pad order: (h_begin, w_begin, h_end, w_end)."""
    if isinstance(p, int):
        return (p, p, p, p)
    if len(p) != 4:
        raise ValueError(f"pads must be an int or (h_begin, w_begin, h_end, w_end), got {p}")
    return (int(p[0]), int(p[1]), int(p[2]), int(p[3]))


def _out_size(n: int, k: int, s: int, pb: int, pe: int, d: int = 1, ceil: bool = False) -> int:
    """Output length of a conv/pool window along one axis (floor, or ceil for ceil-mode pools).

    In ceil mode a last window that would start inside the end padding is dropped, as PyTorch
    and onnxruntime do (ONNX shape inference in onnx 1.23 keeps it; no zoo network hits this).
    """
    span = n + pb + pe - d * (k - 1) - 1
    if not ceil:
        return span // s + 1
    out = math.ceil(span / s) + 1
    if (out - 1) * s >= n + pb:
        out -= 1
    return out


class NetBuilder:
    """Appends NCHW (batch 1) nodes to a graph; each node's output tensor carries its name.

    Every op takes its input tensor name(s) and a unique node `name`, and returns the output
    tensor name. Parameters are named `<node>.weight`, `<node>.bias` (BN also `.running_mean`,
    `.running_var`); `fills` records how `materialize` should fill each of them. `pad` is an int
    or ONNX-ordered (h_begin, w_begin, h_end, w_end).
    """

    def __init__(self, name: str, input_shape: Shape = (3, 224, 224)) -> None:
        self.name = name
        self.input = INPUT
        self.shapes: dict[str, Shape] = {INPUT: tuple(input_shape)}
        self.fills: dict[str, Fill] = {}
        self._nodes: list[onnx.NodeProto] = []
        self._inits: list[TensorProto] = []
        self._names: set[str] = set()

    # -- bookkeeping -------------------------------------------------------------------------

    def _param(self, name: str, dims: Shape, fill: Fill) -> str:
        if name in self.fills:
            return name
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(dims)
        self._inits.append(t)
        self.fills[name] = fill
        return name

    def _node(self, op: str, inputs: list[str], shape: Shape, name: str, **attrs: Any) -> str:
        if name in self._names or name in self.shapes or name in self.fills:
            raise ValueError(f"duplicate node name {name!r} in {self.name}")
        self._names.add(name)
        self._nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        self.shapes[name] = shape
        return name

    def chw(self, x: str) -> tuple[int, int, int]:
        """The (C, H, W) shape of feature map `x`."""
        shape = self.shapes[x]
        if len(shape) != 3:
            raise ValueError(f"{x!r} has shape {shape}, expected (C, H, W)")
        c, h, w = shape
        return c, h, w

    # -- convolution and linear --------------------------------------------------------------

    def conv(
        self,
        x: str,
        cout: int,
        k: Size,
        stride: Size = 1,
        pad: Pads = 0,
        groups: int = 1,
        dilation: Size = 1,
        bias: bool = True,
        *,
        name: str,
    ) -> str:
        cin, h, w = self.chw(x)
        if cin % groups or cout % groups:
            raise ValueError(f"{name}: channels {cin}->{cout} not divisible by groups {groups}")
        (kh, kw), (sh, sw), (dh, dw), p = _pair(k), _pair(stride), _pair(dilation), _pads(pad)
        fan_in = cin // groups * kh * kw
        inputs = [
            x,
            self._param(f"{name}.weight", (cout, cin // groups, kh, kw), Fill("he", fan_in)),
        ]
        if bias:
            inputs.append(self._param(f"{name}.bias", (cout,), Fill("const", 0.0)))
        shape = (
            cout,
            _out_size(h, kh, sh, p[0], p[2], dh),
            _out_size(w, kw, sw, p[1], p[3], dw),
        )
        attrs: dict[str, object] = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=list(p))
        if (dh, dw) != (1, 1):
            attrs["dilations"] = [dh, dw]
        if groups != 1:
            attrs["group"] = groups
        return self._node("Conv", inputs, shape, name, **attrs)

    def gemm(self, x: str, cout: int, bias: bool = True, *, name: str) -> str:
        (cin,) = self.shapes[x]
        inputs = [x, self._param(f"{name}.weight", (cout, cin), Fill("he", cin))]
        if bias:
            inputs.append(self._param(f"{name}.bias", (cout,), Fill("const", 0.0)))
        return self._node("Gemm", inputs, (cout,), name, transB=1)

    def flatten(self, x: str, *, name: str) -> str:
        return self._node("Flatten", [x], (math.prod(self.shapes[x]),), name, axis=1)

    # -- normalization and activations -------------------------------------------------------

    def batchnorm(self, x: str, eps: float = 1e-5, *, name: str) -> str:
        c = self.chw(x)[0]
        stats = (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0))
        params = [self._param(f"{name}.{s}", (c,), Fill("const", v)) for s, v in stats]
        return self._node("BatchNormalization", [x, *params], self.shapes[x], name, epsilon=eps)

    def lrn(
        self,
        x: str,
        size: int = 5,
        alpha: float = 1e-4,
        beta: float = 0.75,
        bias: float = 1.0,
        *,
        name: str,
    ) -> str:
        attrs = dict(size=size, alpha=alpha, beta=beta, bias=bias)
        return self._node("LRN", [x], self.shapes[x], name, **attrs)

    def relu(self, x: str, *, name: str) -> str:
        return self._node("Relu", [x], self.shapes[x], name)

    def relu6(self, x: str, *, name: str) -> str:
        lo = self._param("relu6.min", (), Fill("const", 0.0))
        hi = self._param("relu6.max", (), Fill("const", 6.0))
        return self._node("Clip", [x, lo, hi], self.shapes[x], name)

    def dropout(self, x: str, *, name: str) -> str:
        return self._node("Dropout", [x], self.shapes[x], name)

    def softmax(self, x: str, *, name: str) -> str:
        return self._node("Softmax", [x], self.shapes[x], name, axis=1)

    # -- pooling -----------------------------------------------------------------------------

    def _pool(
        self, op: str, x: str, k: Size, stride: Size, pad: Pads, ceil: bool, name: str
    ) -> str:
        c, h, w = self.chw(x)
        (kh, kw), (sh, sw), p = _pair(k), _pair(stride), _pads(pad)
        shape = (
            c,
            _out_size(h, kh, sh, p[0], p[2], ceil=ceil),
            _out_size(w, kw, sw, p[1], p[3], ceil=ceil),
        )
        attrs: dict[str, object] = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=list(p))
        if ceil:
            attrs["ceil_mode"] = 1
        return self._node(op, [x], shape, name, **attrs)

    def maxpool(
        self, x: str, k: Size, stride: Size = 1, pad: Pads = 0, ceil: bool = False, *, name: str
    ) -> str:
        return self._pool("MaxPool", x, k, stride, pad, ceil, name)

    def avgpool(
        self, x: str, k: Size, stride: Size = 1, pad: Pads = 0, ceil: bool = False, *, name: str
    ) -> str:
        return self._pool("AveragePool", x, k, stride, pad, ceil, name)

    def global_avgpool(self, x: str, *, name: str) -> str:
        return self._node("GlobalAveragePool", [x], (self.chw(x)[0], 1, 1), name)

    # -- merging -----------------------------------------------------------------------------

    def concat(self, xs: list[str], *, name: str) -> str:
        shapes = [self.chw(x) for x in xs]
        if len({s[1:] for s in shapes}) != 1:
            raise ValueError(f"{name}: spatial sizes differ: {shapes}")
        shape = (sum(s[0] for s in shapes), *shapes[0][1:])
        return self._node("Concat", list(xs), shape, name, axis=1)

    def add(self, a: str, b: str, *, name: str) -> str:
        if self.shapes[a] != self.shapes[b]:
            raise ValueError(f"{name}: shapes differ: {self.shapes[a]} vs {self.shapes[b]}")
        return self._node("Add", [a, b], self.shapes[a], name)

    # -- output ------------------------------------------------------------------------------

    def model(self, out: str) -> onnx.ModelProto:
        """The hollow model (initializers without data) whose graph output is `out`, renamed."""
        rename = {out: OUTPUT}
        nodes = []
        for n in self._nodes:
            if out in n.output or out in n.input:
                n = onnx.NodeProto.FromString(n.SerializeToString())
                n.input[:] = [rename.get(i, i) for i in n.input]
                n.output[:] = [rename.get(o, o) for o in n.output]
            nodes.append(n)

        def info(name: str, shape: Shape) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, *shape])

        graph = helper.make_graph(
            nodes,
            self.name,
            [info(INPUT, self.shapes[INPUT])],
            [info(OUTPUT, self.shapes[out])],
            initializer=self._inits,
            value_info=[info(t, s) for t, s in self.shapes.items() if t not in (INPUT, out)],
        )
        return helper.make_model(
            graph,
            producer_name="dse.net.zoo",
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
        )
