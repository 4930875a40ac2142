"""Per-layer cost tables: op class, compute time per device kind, and what each layer holds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from dse.net.graph import Layer, LayerGraph
from dse.platform import KINDS
from models_analytical.coefficients import OP_CLASSES, Coefficients, KindCoefficients

CONV_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv"})
FC_OPS = frozenset(
    {"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "Einsum", "LSTM", "GRU", "RNN"}
)


def is_winograd(layer: Layer) -> bool:
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


def op_class(layer: Layer) -> str:
    if layer.op in CONV_OPS:
        return "conv_winograd" if is_winograd(layer) else "conv"
    if layer.op in FC_OPS:
        return "fc"
    return "elementwise"


def layer_key(layer: Layer) -> str:
    """What a layer's compute time depends on (op, shapes, attributes), hashed: equal keys in
    two networks mean the same kernel work, so a profiled time carries over."""
    attrs = sorted((k, repr(v)) for k, v in layer.attrs.items())
    sig = (
        layer.op,
        [t.shape for t in layer.inputs],
        [t.shape for t in layer.weights],
        [t.shape for t in layer.outputs],
        attrs,
    )
    return hashlib.sha1(repr(sig).encode()).hexdigest()[:16]


def family(layer: Layer) -> str:
    """The regression family of a layer (layers of one family share a linear time model)."""
    if layer.op in CONV_OPS:
        if int(layer.attrs.get("group", 1)) > 1:
            return "conv_grouped"
        if layer.weights and tuple(layer.weights[0].shape[2:]) == (1, 1):
            return "conv_1x1"
        return "conv_winograd" if is_winograd(layer) else "conv"
    if layer.op in FC_OPS:
        return "fc"
    if "Pool" in layer.op:
        return "pool"
    if layer.op in ("BatchNormalization", "LRN", "InstanceNormalization", "LayerNormalization"):
        return "norm"
    if layer.op == "Concat":
        return "concat"
    return "elementwise"


def regression_terms(layer: Layer) -> np.ndarray:
    """The layer's values of REGRESSION_TERMS."""
    act = sum(t.nbytes for t in layer.inputs) + layer.output_bytes
    return np.array([1.0, float(layer.macs), float(act), float(layer.weight_bytes)])


#: Where a layer's time came from, per kind (LayerTables.source).
SOURCES = ("rate", "profiled", "regressed")


@dataclass(frozen=True)
class LayerTables:
    """Arrays the cost kernel reads, indexed [kind, layer] or [layer]."""

    op_class: np.ndarray  # int [L], index into OP_CLASSES
    t_work: np.ndarray  # [K, L] seconds to compute the whole layer (scales with its share)
    t_fixed: np.ndarray  # [K, L] seconds per part regardless of share (dispatch, sync)
    out_bytes: np.ndarray  # float64 [L], as the kernel reads them
    weight_bytes: np.ndarray  # float64 [L]
    source: np.ndarray  # int [K, L] index into SOURCES
    block: np.ndarray  # float64 [K, L] channels per block of a part (1: any share)
    part_fixed: np.ndarray  # float64 [K, L] share of the whole layer's time every part pays


#: The largest fixed share of a part: a timed line's intercept can be most of a small layer,
#: and a family's share x channels over a layer's few output channels can exceed 1.
PART_FIXED_MAX = 0.9


def part_fixed_share(layer: Layer, coeff: KindCoefficients) -> float:
    """What every part of ``layer`` pays whatever its channel share, as a share of the whole
    layer's time: timed (``coeff.part_fixed``), else its family's share x channels over its
    output channels, else 0 (a part costs its share)."""
    if layer.op not in CONV_OPS and layer.op not in FC_OPS:
        return 0.0
    timed = coeff.part_fixed.get(layer_key(layer))
    if timed is not None:
        return timed
    per_channel = coeff.part_fixed_channels.get(family(layer))
    if per_channel is None or layer.out_channels < 1:
        return 0.0
    return min(per_channel / layer.out_channels, PART_FIXED_MAX)


def layer_tables(graph: LayerGraph, coefficients: Coefficients) -> LayerTables:
    classes = np.array([OP_CLASSES.index(op_class(layer)) for layer in graph], dtype=np.int64)
    n_kinds = len(KINDS)
    t_work = np.zeros((n_kinds, len(graph)))
    t_fixed = np.zeros((n_kinds, len(graph)))
    source = np.zeros((n_kinds, len(graph)), dtype=np.int64)
    block = np.ones((n_kinds, len(graph)))
    part_fixed = np.zeros((n_kinds, len(graph)))
    macs = graph.macs.astype(np.float64)
    conv = np.array([layer.op in CONV_OPS for layer in graph])
    for k, kind in enumerate(KINDS):
        if kind not in coefficients:
            continue
        coeff = coefficients[kind]
        per_class = np.array([coeff.layer[c] for c in OP_CLASSES])
        t_work[k] = macs / (coeff.frequency_hz * per_class[classes])  # Eq. 4.7
        t_fixed[k] = coeff.layer_overhead_s
        block[k, conv] = coeff.channel_block
        if coeff.part_fixed or coeff.part_fixed_channels:
            part_fixed[k] = [part_fixed_share(layer, coeff) for layer in graph]
        if coeff.layer_s or coeff.regression:
            for i, layer in enumerate(graph):
                t = coeff.layer_s.get(layer_key(layer))
                if t is not None:
                    t_work[k, i], source[k, i] = t, 1
                    continue
                c = coeff.regression.get(family(layer)) or coeff.regression.get("any")
                if c is not None:
                    t_work[k, i] = max(float(np.dot(c, regression_terms(layer))), 0.0)
                    source[k, i] = 2
    return LayerTables(
        classes,
        t_work,
        t_fixed,
        graph.output_bytes.astype(np.float64),
        graph.weight_bytes.astype(np.float64),
        source,
        block,
        part_fixed,
    )
