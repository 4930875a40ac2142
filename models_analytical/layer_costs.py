"""Per-layer cost tables: op class, compute time per device type, and what each layer holds."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np

from dse.net.fusion import FUSED, cost_families
from dse.net.graph import Layer, LayerGraph
from dse.net.ops import family, memory_bound, products
from models_analytical.coefficients import (
    OP_CLASSES,
    Coefficients,
    RegressionRow,
    TypeCoefficients,
)

#: Op types whose weights count as convolutions' (packed by onnxruntime: ``WEIGHT_CLASSES``).
CONV_OPS = frozenset(products.CONV_OPS)
#: The cost families of convolutions (:func:`dse.net.ops.family`).
CONV_FAMILIES = frozenset(
    {"conv_winograd", "conv", "conv_1x1", "conv_grouped", "conv_depthwise", "conv_transpose"}
)


def op_class(layer: Layer) -> str:
    """The layer's class in Eq. 4.7 (``OP_CLASSES``): Winograd-eligible convolutions (3x3,
    stride 1, not depthwise, whatever the groups), other convolutions, fully connected, and
    the rest (elementwise)."""
    fam = family(layer)
    if fam in CONV_FAMILIES:
        return "conv_winograd" if products.is_winograd(layer) else "conv"
    return fam if fam == "fc" else "elementwise"


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


def regression_terms(layer: Layer, family_name: str | None = None) -> np.ndarray:
    """The layer's values of REGRESSION_TERMS, for its cost family ``family_name`` (default
    its op's): a family bound by the bytes it moves (:func:`dse.net.ops.memory_bound`) has
    no MAC or weight term, its constant operands counted among the bytes it reads."""
    act = sum(t.nbytes for t in layer.inputs) + layer.output_bytes
    if memory_bound(family_name or family(layer)):
        return np.array([1.0, 0.0, float(act + layer.weight_bytes), 0.0])
    return np.array([1.0, float(layer.macs), float(act), float(layer.weight_bytes)])


#: Where a layer's time came from, per type (LayerTables.source): Eq. 4.7, the type's profile,
#: the type's regression, another type's profile (:func:`borrowed_profiles`).
SOURCES = ("rate", "profiled", "regressed", "scaled")

#: Layer keys two types must both have profiled before one's profile stands in for the
#: other's (:func:`borrowed_profiles`).
SCALE_MIN_COMMON = 10


@dataclass(frozen=True)
class LayerTables:
    """Arrays the cost kernel reads, indexed [type, layer] or [layer] (types in the order of
    :attr:`Coefficients.types <models_analytical.coefficients.Coefficients.types>`)."""

    op_class: np.ndarray  # int [L], index into OP_CLASSES
    t_work: np.ndarray  # [Y, L] seconds to compute the whole layer (scales with its share)
    t_fixed: np.ndarray  # [Y, L] seconds per part regardless of share (dispatch, sync)
    out_bytes: np.ndarray  # float64 [L], as the kernel reads them
    weight_bytes: np.ndarray  # float64 [L]
    source: np.ndarray  # int [Y, L] index into SOURCES
    block: np.ndarray  # float64 [Y, L] channels per block of a part (1: any share)
    part_fixed: np.ndarray  # float64 [Y, L] share of the whole layer's time every part pays
    row_fixed: np.ndarray  # float64 [Y, L] ... every band of it pays (split by rows)


#: The largest fixed share of a part: a timed line's intercept can be most of a small layer,
#: and a family's share x channels over a layer's few output channels can exceed 1.
PART_FIXED_MAX = 0.9


def part_fixed_share(layer: Layer, coeff: TypeCoefficients) -> float:
    """What every part of ``layer`` pays whatever its channel share, as a share of the whole
    layer's time: timed (``coeff.part_fixed``), else its family's share x channels over its
    output channels, else 0 (a part costs its share)."""
    fam = family(layer)
    if fam not in CONV_FAMILIES and fam != "fc":
        return 0.0
    timed = coeff.part_fixed.get(layer_key(layer))
    if timed is not None:
        return timed
    per_channel = coeff.part_fixed_channels.get(family(layer))
    if per_channel is None or layer.out_channels < 1:
        return 0.0
    return min(per_channel / layer.out_channels, PART_FIXED_MAX)


def borrowed_profiles(coefficients: Coefficients) -> dict[str, list[tuple[dict, float]]]:
    """Per type, the other types' profiles (``layer_s``) that stand in for a layer it did not
    profile, each with the ratio that brings it to this type: of the two types' total times
    over the layer keys both profiled, at least :data:`SCALE_MIN_COMMON` of them (the long
    layers weigh most; per layer, short ones on a CPU share run at a whole core's speed
    until its quota is spent, and their median ratio of 0.4 to 0.6 shares was 1.08 where
    the totals give 1.60); most keys in common first.
    A device too small to hold a network (VGG-16 on 512 MB) profiles none of its layers; the
    same layer on another type, scaled by how the two types compare on the layers they share,
    is nearer than the regression, which extrapolates far from the layers it was fitted on."""
    out: dict[str, list[tuple[dict, float]]] = {}
    for name, coeff in coefficients.types.items():
        found = []
        for other_name, other in coefficients.types.items():
            compared = profile_ratio(coeff, other) if other_name != name else None
            if compared is not None:
                found.append((compared[0], other_name, other.layer_s, compared[1]))
        found.sort(key=lambda f: (-f[0], f[1]))
        out[name] = [(layer_s, ratio) for _, _, layer_s, ratio in found]
    return out


def profile_ratio(coeff: TypeCoefficients, other: TypeCoefficients) -> tuple[int, float] | None:
    """How ``coeff``'s type compares with ``other``'s on the layer keys both profiled: their
    count and the ratio of the two types' total times over them; None below
    :data:`SCALE_MIN_COMMON` keys."""
    common = [k for k in coeff.layer_s if k in other.layer_s and other.layer_s[k] > 0]
    if len(common) < SCALE_MIN_COMMON:
        return None
    ratio = sum(coeff.layer_s[k] for k in common) / sum(other.layer_s[k] for k in common)
    return len(common), ratio


def unprofiled_ops(graph: LayerGraph, coefficients: Coefficients) -> list[str]:
    """The op types of ``graph``'s layers that calibration profiled on no device type: their
    times come from a family's regression or a default, fitted on other ops. Empty where the
    coefficients do not say what was profiled (uncalibrated, or calibrated before they did)."""
    seen = {op for k in coefficients.types.values() for op in k.profiled_ops}
    return sorted({layer.op for layer in graph} - seen) if seen else []


#: The regression row of the families bound by the bytes they move, for one without a row.
MEMORY_ROW = "memory"


def regression_row(coeff: TypeCoefficients, family_name: str) -> RegressionRow | None:
    """The regression row a layer of ``family_name`` takes: its family's; else, for a family
    bound by the bytes it moves, :data:`MEMORY_ROW`'s; else ``any``'s. A fused layer
    (:mod:`dse.net.fusion`) without its family's row costs nothing of its own."""
    reg = coeff.regression
    if family_name in reg:
        return reg[family_name]
    if family_name == FUSED:
        return (0.0, 0.0, 0.0, 0.0)
    if memory_bound(family_name) and MEMORY_ROW in reg:
        return reg[MEMORY_ROW]
    return reg.get("any")


def layer_tables(graph: LayerGraph, coefficients: Coefficients) -> LayerTables:
    classes = np.array([OP_CLASSES.index(op_class(layer)) for layer in graph], dtype=np.int64)
    n_types = len(coefficients.types)
    t_work = np.zeros((n_types, len(graph)))
    t_fixed = np.zeros((n_types, len(graph)))
    source = np.zeros((n_types, len(graph)), dtype=np.int64)
    block = np.ones((n_types, len(graph)))
    part_fixed = np.zeros((n_types, len(graph)))
    row_fixed = np.zeros((n_types, len(graph)))
    macs = graph.macs.astype(np.float64)
    conv = np.array([layer.op in CONV_OPS for layer in graph])
    borrowed = borrowed_profiles(coefficients)
    keys = [layer_key(layer) for layer in graph]
    families = cost_families(graph)
    for k, (name, coeff) in enumerate(coefficients.types.items()):
        rates = cast("Mapping[str, float]", coeff.layer)  # a TypedDict keyed by op class
        per_class = np.array([rates[c] for c in OP_CLASSES])
        t_work[k] = macs / (coeff.frequency_hz * per_class[classes])  # Eq. 4.7
        t_fixed[k] = coeff.layer_overhead_s
        block[k, conv] = coeff.channel_block
        if coeff.part_fixed or coeff.part_fixed_channels:
            part_fixed[k] = [part_fixed_share(layer, coeff) for layer in graph]
        if coeff.row_fixed:
            row_fixed[k] = [
                min(coeff.row_fixed.get(family(layer), 0.0), PART_FIXED_MAX) for layer in graph
            ]
        if coeff.layer_s or coeff.regression:
            for i, (layer, key) in enumerate(zip(graph, keys, strict=True)):
                t = coeff.layer_s.get(key)
                if t is not None:
                    t_work[k, i], source[k, i] = t, 1
                    continue
                other = next((b for b in borrowed[name] if key in b[0]), None)
                if other is not None:
                    t_work[k, i], source[k, i] = other[0][key] * other[1], 3
                    continue
                c = regression_row(coeff, families[i])
                if c is not None:
                    t_work[k, i] = max(float(np.dot(c, regression_terms(layer, families[i]))), 0.0)
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
        row_fixed,
    )
