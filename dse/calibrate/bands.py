"""Row-band micro-benchmarks: how a convolution's time follows its share of the output rows (a
band of a layer split by rows, :mod:`dse.mapping.rows`).

``measure_band_costs`` times each row-splittable Conv of a network (``LayerGraph.
row_splittable``: any group count; one per :func:`~models_analytical.layer_costs.layer_key`,
none already timed) alone, whole and as bands of about a quarter, a half and three quarters of
its output rows. The rules:

* a band is the top one, output rows ``[0, rows)``, as the first device of a split computes it;
  the whole layer is the band ``[0, full)``;
* a band's model is what the runtime runs for it: the layer's node with the top and bottom
  padding the band needs (:func:`dse.net.ops.row_part`, ``auto_pad`` made explicit),
  reading exactly the input rows the band needs (:meth:`dse.net.ops.RowWindow.needed`), with
  the layer's whole weights (random);
* every band of every layer is timed interleaved, as the parts are (every round runs each once,
  one warm-up round: :func:`dse.calibrate.channels.time_interleaved`), at the device's thread
  count with the runtime's session settings (:func:`dse.runtime.rank.sessions.session`); each
  band's time is the median of its rounds.

Rows ``{key, family, layer, rows, full, seconds}``: what
:func:`models_analytical.layer_fits.fit_row_fixed` fits the share every band pays on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from dse.calibrate.channels import GROUP_WEIGHT_BYTES, time_interleaved, weight_groups
from dse.net import ops
from dse.runtime.rank.sessions import session
from models_analytical.layer_costs import family, layer_key

#: The bands timed beside the whole layer, as shares of its output rows.
BAND_SHARES = (0.25, 0.5, 0.75)


def band_rows(full: int) -> list[int]:
    """Output rows of the bands timed for a layer of ``full`` output rows, ascending: the
    nearest whole rows to a quarter, a half and three quarters of them (halves rounded up),
    and all of them; the ones that are neither 0 nor ``full`` only once."""
    out = {full}
    for s in BAND_SHARES:
        r = int(full * s + 0.5)
        if 0 < r < full:
            out.add(r)
    return sorted(out)


def band_model(
    layer: Any, node: NodeProto, band: tuple[int, int], seed: int = 0
) -> tuple[ModelProto, tuple[int, int]] | None:
    """``layer`` (its ONNX ``node``) alone computing its output rows ``band`` = [o0, o1) from
    the input rows they read, random weights (the same for every band of a ``seed``): the
    model, reading ``x`` and writing ``y``, and those input rows ``(lo, hi)``. None where the
    layer cannot compute a band of its rows, or a static input of its node is not among its
    weights (:func:`band_part`)."""
    found = band_part(layer, node, band)
    if found is None:
        return None
    part, (lo, hi) = found
    static = {t.name: t.shape for t in layer.weights}
    shape = list(layer.inputs[0].shape)
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal(static[n], dtype=np.float32) * 0.01, n)
        for n in part.keep
    ]
    g = helper.make_graph(
        part.nodes,
        "band",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*shape[:2], hi - lo, shape[3]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, (lo, hi)


def band_part(layer: Any, node: NodeProto, band: tuple[int, int]) -> tuple[Any, tuple] | None:
    """The nodes computing ``band`` of ``layer``'s rows and the input rows they read, without
    weights; None where :func:`band_model` gives none."""
    window = ops.row_window(layer)
    if window is None or len(layer.inputs[0].shape) != 4:
        return None
    in_rows = layer.inputs[0].shape[2]
    lo, hi = window.needed(band[0], band[1], in_rows)
    columns = ops.row_columns(layer)
    part = ops.row_part(
        node, layer.name, band, (lo, hi), window, in_rows, "@band", "x", "y", columns
    )
    static = {t.name for t in layer.weights}
    if any(name not in static for name in part.keep):
        return None
    return part, (lo, hi)


def measure_band_costs(net: Any, threads: int, repeats: int, seen: set | None = None) -> list:
    """Rows ``{key, family, layer, rows, full, seconds}``: each row-splittable Conv of ``net``
    (a :class:`~dse.net.Net`: its ``graph`` and ONNX ``model``; one per layer key, none of
    ``seen``, which gets the keys timed) alone, whole and as the bands of :func:`band_rows`,
    timed as the module says; a layer of fewer than 2 output rows is left out. Layers are
    timed in groups of at most a quarter of :data:`~dse.calibrate.channels.
    GROUP_WEIGHT_BYTES` of weights (a heavier one alone): each of a layer's four models holds
    its whole weights, where its channel parts hold 2.5 times them together. A group's
    sessions are released before the next group's are made (all of a network's at once can
    exceed a small device's memory cap)."""
    seen = set() if seen is None else seen
    graph = net.graph
    candidates = []
    for layer in graph:
        key = layer_key(layer)
        if not graph.row_splittable[layer.index] or key in seen:
            continue
        counts = band_rows(int(graph.out_rows[layer.index]))
        node = net.model.graph.node[layer.node]
        if len(counts) < 2 or any(band_part(layer, node, (0, r)) is None for r in counts):
            continue
        seen.add(key)
        candidates.append((layer, key, counts))
    rows: list[dict] = []
    for group in weight_groups(candidates, GROUP_WEIGHT_BYTES // 4):
        rows += _time_band_group(net, group, threads, repeats)
    return rows


def _time_band_group(net: Any, group: list, threads: int, repeats: int) -> list:
    """:func:`measure_band_costs`'s rows for one group of ``(layer, key, counts)``, timed
    interleaved."""
    cases = []
    for layer, key, counts in group:
        node = net.model.graph.node[layer.node]
        x = np.random.default_rng(layer.index).random(layer.inputs[0].shape, dtype=np.float32)
        runs = []
        for r in counts:
            built = band_model(layer, node, (0, r))
            assert built is not None  # the group holds only layers with a part for every band
            m, (lo, hi) = built
            runs.append((session(m, "cpu", threads), {"x": np.ascontiguousarray(x[:, :, lo:hi])}))
            del m
        cases.append((layer, key, counts, runs))
    medians = time_interleaved([runs for *_, runs in cases], repeats)
    return [
        {
            "key": key,
            "family": family(layer),
            "layer": f"{net.graph.name}/{layer.name}",
            "rows": r,
            "full": counts[-1],
            "seconds": t,
        }
        for (layer, key, counts, _), acc in zip(cases, medians, strict=True)
        for r, t in zip(counts, acc, strict=True)
    ]
