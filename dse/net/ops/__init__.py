"""What dse knows of each ONNX op, one entry per op family, in a registry.

An entry (:class:`Op`) says, for the op types of one family:

* ``macs``: its multiply-accumulate count, from an :class:`OpView` (attributes and static
  shapes of one node). Conventions, chosen to match the usual published counts:

  - convolutions and matrix products count one MAC per multiply-add of the product; bias
    additions are not counted;
  - pooling counts one MAC per element of every window (window size per output element);
    global pooling one per input element;
  - elementwise ops, activations, normalisations and Softmax count one per output element
    (BatchNormalization folds to one multiply-add per element at inference); LRN counts its
    window size per element;
  - data movement (Concat, Reshape, Flatten, Transpose, Slice, Pad, Gather, ...) is free.

  An op with no entry is estimated as one MAC per output element and flagged as estimated.
* ``family``: the cost family its time is modelled and regressed in, from the layer (op,
  attributes, weight shapes): bound by their MACs (:data:`COMPUTE_FAMILIES`: ``conv_winograd``,
  ``conv``, ``conv_1x1``, ``conv_grouped``, ``conv_depthwise``, ``conv_transpose``, ``fc``) or
  by the bytes they move (``pool``, ``norm``, ``concat``, ``activation`` (one tensor in),
  ``arith`` (several), ``resize``, ``softmax``, ``reduce``, ``movement``; ``elementwise`` for
  an op without an entry). A layer onnxruntime runs inside another's kernel is costed as
  ``fused`` whatever its op (:mod:`dse.net.fusion`).
* ``channels``: how it splits by output channels (Layer-Output-Partitioning), given a constant
  weight: :class:`ChannelSplit`, the weight's input position, the output's channel axis, and
  how the runtime computes one part (``slice``: the nodes computing output channels
  ``[c0, c1)``, with the weights they need cut from the node's). An op without it is never
  split by channels; every op that has it can be sliced by the runtime.
* ``local``: whether output channel k depends on input channel k alone, so that after a split
  layer it runs on that layer's parts: ``"any"`` (elementwise: whatever the split axis),
  ``"axis1"`` (pooling, BatchNormalization: only when the channels are axis 1, NCHW), ``""``.
  ``local_inputs``: inputs cut with the channels when it runs on a part (BatchNormalization's
  scale, bias, mean and variance).
* ``not_parameters``: static float inputs that are statistics or settings, not trained
  parameters (counted in weight bytes, not in parameters).
* ``fused``: onnxruntime's CPU provider fuses it into the layer producing its input, so a
  profile times it inside that layer.
* ``rows``: how it computes a band of its output rows (axis 2 of NCHW) from a band of its first
  input's rows: a rule giving the layer's row window :class:`RowWindow` (stride, rows its
  kernel spans, top padding), or None where this layer cannot (not 4-D, a padding it cannot
  keep per band). Elementwise ops and BatchNormalization read the same row (1, 1, 0). The
  runtime computes a band with the node as it is, its top and bottom padding set to what the
  band needs (:func:`row_part`): one rule for every op that has ``rows``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from onnx import NodeProto, helper

from dse.net.window import needed

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpView:
    """What a rule may read about one node."""

    op: str
    attrs: dict[str, Any]
    in_shapes: Sequence[Shape | None]
    out_shapes: Sequence[Shape]
    in_static: Sequence[bool] = field(default_factory=tuple)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


class TensorLike(Protocol):
    """What a rule reads of a tensor (``dse.net.graph.Tensor``): its static shape."""

    @property
    def shape(self) -> Shape: ...


class LayerLike(Protocol):
    """What a family or row rule reads of a layer (``dse.net.graph.Layer``), read-only."""

    @property
    def op(self) -> str: ...
    @property
    def attrs(self) -> Mapping[str, Any]: ...
    @property
    def inputs(self) -> Sequence[TensorLike]: ...
    @property
    def weights(self) -> Sequence[TensorLike]: ...
    @property
    def output_shape(self) -> Shape: ...
    @property
    def out_channels(self) -> int: ...


#: A weight of a part: the source static tensor's name and its cuts, (axis, start, stop) each.
Cut = tuple[str, tuple[tuple[int, int, int], ...]]


@dataclass
class Part:
    """The nodes computing one part of a layer, in terms the runtime turns into a sub-model:
    ``weights`` new initializer name -> :data:`Cut` of a static input; ``constants`` small new
    tensors; ``keep`` static inputs used as they are."""

    nodes: list[NodeProto] = field(default_factory=list)
    weights: dict[str, Cut] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    keep: list[str] = field(default_factory=list)


#: (node, layer name, output channels [c0, c1), part tag, the part's output name,
#: static shapes by name, the layer's input channels) -> the part's nodes.
Slicer = Callable[[NodeProto, str, tuple[int, int], str, str, dict[str, Shape], int], Part]


@dataclass(frozen=True)
class ChannelSplit:
    """How an op splits by output channels."""

    weight: int  # input position of the weight that must be constant
    axis: int  # the output's channel axis: 1 (NCHW) or -1 (last)
    slice: Slicer


@dataclass(frozen=True)
class RowWindow:
    """The rows of a layer's first input that its output row o reads: ``o * stride - pad``
    to ``o * stride - pad + span`` (exclusive), clipped to the input's rows. ``transposed``
    (ConvTranspose): the other way round, input row i reaching output rows ``i * stride -
    pad`` to ``i * stride - pad + span``."""

    stride: int
    span: int  # (kernel rows - 1) x dilation + 1
    pad: int  # top padding (explicit, or as auto_pad resolves it)
    transposed: bool = False

    def needed(self, o0: int, o1: int, in_rows: int) -> tuple[int, int]:
        """Input rows ``[lo, hi)`` that output rows ``[o0, o1)`` read (empty band: (0, 0)):
        :func:`dse.net.window.needed`, the one home of the rule."""
        lo, hi = needed(o0, o1, self.stride, self.span, self.pad, in_rows, self.transposed)
        return int(lo), int(hi)


MacRule = Callable[[OpView], int]
FamilyRule = Callable[[LayerLike], str]
RowRule = Callable[[LayerLike], RowWindow | None]


@dataclass(frozen=True)
class Op:
    """What dse knows of one op type (module docstring)."""

    macs: MacRule
    family: FamilyRule
    channels: ChannelSplit | None = None
    local: str = ""
    local_inputs: frozenset[int] = frozenset()
    not_parameters: frozenset[int] = frozenset()
    fused: bool = False
    rows: RowRule | None = None


REGISTRY: dict[str, Op] = {}


def register(*ops: str, **entry: Any) -> Callable[[MacRule], MacRule]:
    """Register the decorated MAC rule and ``entry`` (the other :class:`Op` fields) for
    ``ops``."""

    def add(fn: MacRule) -> MacRule:
        for op in ops:
            if op in REGISTRY:
                raise ValueError(f"op {op} registered twice")
            REGISTRY[op] = Op(macs=fn, **entry)
        return fn

    return add


def numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


def family_of(name: str) -> FamilyRule:
    """A family rule that names one family whatever the layer."""
    return lambda layer: name


def lookup(op: str) -> Op | None:
    return REGISTRY.get(op)


def count_macs(view: OpView) -> tuple[int, bool]:
    """MACs of a node and whether they were estimated (no entry for its op)."""
    entry = REGISTRY.get(view.op)
    if entry is None:
        return sum(numel(s) for s in view.out_shapes), True
    return int(entry.macs(view)), False


def family(layer: LayerLike) -> str:
    """The cost family of a layer (``elementwise`` for ops without an entry)."""
    entry = REGISTRY.get(layer.op)
    return entry.family(layer) if entry is not None else "elementwise"


#: The families whose time follows their MACs; every other family's follows the bytes it
#: moves (its inputs, constant operands included, and its outputs).
COMPUTE_FAMILIES = frozenset(
    {"conv_winograd", "conv", "conv_1x1", "conv_grouped", "conv_depthwise", "conv_transpose", "fc"}
)


def memory_bound(family_name: str) -> bool:
    """Whether a family's time follows the bytes it moves, not its MACs."""
    return family_name not in COMPUTE_FAMILIES


def channel_split(op: str) -> ChannelSplit | None:
    entry = REGISTRY.get(op)
    return entry.channels if entry is not None else None


def local(op: str) -> str:
    entry = REGISTRY.get(op)
    return entry.local if entry is not None else ""


def row_window(layer: LayerLike) -> RowWindow | None:
    """How ``layer`` splits by output rows (:class:`RowWindow`), or None where it cannot."""
    entry = REGISTRY.get(layer.op)
    if entry is None or entry.rows is None:
        return None
    return entry.rows(layer)


def same_row(layer: LayerLike) -> RowWindow | None:
    """The row rule of ops that read the same row of their input (elementwise, per-channel
    normalisation): 4-D in and out, and no static input that varies along the rows."""
    out = getattr(layer, "output_shape", ())
    if len(out) != 4:
        return None
    for w in getattr(layer, "weights", ()):  # broadcast from the right: axis 2 is [-2]
        if len(w.shape) >= 2 and w.shape[-2] != 1:
            return None
    return RowWindow(1, 1, 0)


def window_rows(layer: LayerLike, kernel: int, stride_at: int = 0) -> RowWindow | None:
    """The row rule of a windowed op over NCHW (Conv, pooling) with ``kernel`` rows: its
    strides, dilations and pads (``auto_pad`` resolved) along axis 2."""
    out = getattr(layer, "output_shape", ())
    inputs = getattr(layer, "inputs", ())
    if len(out) != 4 or not inputs or len(inputs[0].shape) != 4:
        return None
    a = layer.attrs
    stride = int((a.get("strides") or [1, 1])[stride_at])
    dilation = int((a.get("dilations") or [1, 1])[stride_at])
    span = (int(kernel) - 1) * dilation + 1
    auto = a.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    h_in = int(inputs[0].shape[2])
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pad = same_pads(h_in, span, stride, auto)[0]
    elif auto == "VALID":
        pad = 0
    elif auto == "NOTSET":
        pads = a.get("pads") or [0, 0, 0, 0]
        pad = int(pads[0])
    else:
        return None
    if stride < 1 or span < 1 or pad < 0:
        return None
    return RowWindow(stride, span, pad)


def not_parameters(op: str) -> frozenset[int]:
    entry = REGISTRY.get(op)
    return entry.not_parameters if entry is not None else frozenset()


def fused(op: str) -> bool:
    entry = REGISTRY.get(op)
    return bool(entry is not None and entry.fused)


def local_part(
    node: NodeProto, layer: str, part: tuple[int, int], tag: str, x: str, out: str
) -> Part:
    """Output channels ``part`` of a channel-local layer computed from the same channels of its
    input ``x`` (the part of the split layer it follows): the node reading ``x`` and writing
    ``out``, its per-channel inputs (``local_inputs``) cut, other static inputs kept."""
    entry = REGISTRY[node.op_type]
    c0, c1 = part
    p = Part()
    inputs = list(node.input)
    for i, t in enumerate(node.input):
        if i == 0:
            inputs[i] = x
        elif t and i in entry.local_inputs:
            inputs[i] = f"{t}@{layer}{tag}"
            p.weights[inputs[i]] = (t, ((0, c0, c1),))
        elif t:
            p.keep.append(t)
    n = helper.make_node(node.op_type, inputs, [out], name=f"{layer}{tag}")
    n.attribute.extend(node.attribute)
    if node.domain:
        n.domain = node.domain
    p.nodes.append(n)
    return p


def row_part(
    node: NodeProto,
    layer: str,
    band: tuple[int, int],
    rows: tuple[int, int],
    window: RowWindow,
    in_rows: int,
    tag: str,
    x: str,
    out: str,
    columns: tuple[int, int] | None = None,
) -> Part:
    """Output rows ``band`` = [o0, o1) of a row-local layer (``rows`` in the registry),
    computed from ``x``, its first input's rows ``rows`` = [lo, hi) (:meth:`RowWindow.needed`
    of the band): the node as it is, reading ``x`` and writing ``out``, its top and bottom
    padding what the band needs (the image's own padding at its borders, none inside: the
    rows there are real), its column padding as it was (``auto_pad`` made explicit: a
    ``SAME_*`` one needs ``columns``, the input's width and the kernel's columns). A
    ConvTranspose band sets its row padding and ``output_padding`` instead
    (:func:`_transposed_pads`)."""
    o0, o1 = band
    lo, hi = rows
    n = NodeProto()
    n.CopyFrom(node)
    n.name = f"{layer}{tag}"
    n.input[0] = x
    del n.output[:]
    n.output.append(out)
    if window.transposed:
        _transposed_pads(n, band, rows, window)
    elif window.span > 1 or window.stride > 1 or window.pad > 0 or _has_pads(node):
        top = max(0, window.pad - o0 * window.stride)
        bottom = max(0, (o1 - 1) * window.stride - window.pad + window.span - in_rows)
        left, right = _column_pads(node, columns)
        attrs = [a for a in n.attribute if a.name not in ("pads", "auto_pad")]
        del n.attribute[:]
        n.attribute.extend(attrs)
        n.attribute.append(helper.make_attribute("pads", [top, left, bottom, right]))
    return Part(nodes=[n], keep=[t for t in node.input[1:] if t])


def _transposed_pads(
    n: NodeProto,
    band: tuple[int, int],
    rows: tuple[int, int],
    window: RowWindow,
) -> None:
    """A ConvTranspose band's rows: over input rows ``rows`` = [lo, hi) the node without row
    padding makes rows ``u`` of ``(hi - lo - 1) x stride + span`` (u = 0 at input row lo's
    first); output row o of the whole layer is u = o + pad - lo x stride there. The band's
    top and bottom padding cut the rows before and after it, and where the band runs past
    them (into the layer's ``output_padding``) its own ``output_padding`` adds them."""
    o0, o1 = band
    lo, hi = rows
    top = o0 + window.pad - lo * window.stride
    bottom = (hi - lo - 1) * window.stride + window.span - top - (o1 - o0)
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    out_pad = list(attrs.get("output_padding") or [0, 0])
    kept = [a for a in n.attribute if a.name not in ("pads", "output_padding")]
    del n.attribute[:]
    n.attribute.extend(kept)
    n.attribute.append(helper.make_attribute("pads", [top, pads[1], max(bottom, 0), pads[3]]))
    n.attribute.append(helper.make_attribute("output_padding", [max(-bottom, 0), out_pad[1]]))


def _has_pads(node: NodeProto) -> bool:
    return any(a.name in ("pads", "auto_pad") for a in node.attribute)


def same_pads(size: int, span: int, stride: int, auto: str) -> tuple[int, int]:
    """The padding before and after an axis of ``size`` that ``auto_pad`` SAME_UPPER or
    SAME_LOWER gives a window spanning ``span`` (kernel x dilation) at ``stride``, as ONNX
    resolves it: the output keeps ``ceil(size / stride)``, the odd one after for UPPER,
    before for LOWER."""
    total = max((-(-size // stride) - 1) * stride + span - size, 0)
    small, large = total // 2, total - total // 2
    return (small, large) if auto == "SAME_UPPER" else (large, small)


def row_columns(layer: LayerLike) -> tuple[int, int] | None:
    """What :func:`row_part` needs of ``layer`` to resolve an ``auto_pad`` SAME_* of its
    columns: the input's width and the kernel's columns (None where it is not 4-D)."""
    shape = layer.inputs[0].shape if layer.inputs else ()
    if len(shape) != 4:
        return None
    kernel = layer.attrs.get("kernel_shape")
    if kernel:
        return int(shape[3]), int(kernel[-1])
    if layer.weights and len(layer.weights[0].shape) == 4:
        return int(shape[3]), int(layer.weights[0].shape[3])
    return int(shape[3]), 1


def _column_pads(node: NodeProto, columns: tuple[int, int] | None) -> tuple[int, int]:
    """The node's left and right padding (axis 3), ``auto_pad`` resolved as ONNX does from the
    input's width and the kernel's columns (``columns``) and the node's own stride and
    dilation along the columns: ``SAME_UPPER`` puts the odd pixel on the right, ``SAME_LOWER``
    on the left."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto == "NOTSET":
        pads = list(attrs.get("pads") or [0, 0, 0, 0])
        return int(pads[1]), int(pads[3])
    if auto == "VALID":
        return 0, 0
    if auto not in ("SAME_UPPER", "SAME_LOWER") or columns is None:
        raise ValueError(f"node '{node.name}': auto_pad {auto} needs the input's columns")
    width, kernel = columns
    stride = int((attrs.get("strides") or [1, 1])[-1])
    dilation = int((attrs.get("dilations") or [1, 1])[-1])
    return same_pads(width, (int(kernel) - 1) * dilation + 1, stride, auto)


# the families register themselves on import
from dse.net.ops import elementwise, movement, pooling, products  # noqa: E402, F401
