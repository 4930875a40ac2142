"""Per-layer cost tables: op class, compute time per device kind, and what each layer holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.net.graph import Layer, LayerGraph
from dse.platform import KINDS
from models_analytical.coefficients import OP_CLASSES, Coefficients

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


@dataclass(frozen=True)
class LayerTables:
    """Arrays the cost kernel reads, indexed [kind, layer] or [layer]."""

    op_class: np.ndarray  # int [L], index into OP_CLASSES
    t_work: np.ndarray  # [K, L] seconds to compute the whole layer (scales with its share)
    t_fixed: np.ndarray  # [K, L] seconds per part regardless of share (dispatch, sync)
    out_bytes: np.ndarray  # float64 [L], as the kernel reads them
    weight_bytes: np.ndarray  # float64 [L]


def layer_tables(graph: LayerGraph, coefficients: Coefficients) -> LayerTables:
    classes = np.array([OP_CLASSES.index(op_class(layer)) for layer in graph], dtype=np.int64)
    n_kinds = len(KINDS)
    t_work = np.zeros((n_kinds, len(graph)))
    t_fixed = np.zeros((n_kinds, len(graph)))
    macs = graph.macs.astype(np.float64)
    for k, kind in enumerate(KINDS):
        if kind not in coefficients:
            continue
        coeff = coefficients[kind]
        per_class = np.array([coeff.layer[c] for c in OP_CLASSES])
        t_work[k] = macs / (coeff.frequency_hz * per_class[classes])  # Eq. 4.7
        t_fixed[k] = coeff.layer_overhead_s
    return LayerTables(
        classes,
        t_work,
        t_fixed,
        graph.output_bytes.astype(np.float64),
        graph.weight_bytes.astype(np.float64),
    )
