"""Channel-share micro-benchmarks: how a layer's time follows its share of the output channels
(a Layer-Output-Partitioning part).

- ``measure_channel_scaling``: CPU kernels compute output channels in blocks (onnxruntime's
  NCHWc layout: 8 or 16 channels), so a part of 8 channels can cost as much as one of 16. Each
  case is a synthetic one-Conv model.
- ``measure_part_costs``: each splittable Conv and fully connected layer of a network alone,
  whole and as parts, for the fixed share of the layer every part pays (its input's transform).

Everything is timed at the device's thread count with the runtime's session settings.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from dse.runtime.sessions import session
from models_analytical.layer_costs import family, layer_key

#: (input channels, full output channels, spatial size, output-channel counts timed)
CASES = (
    (64, 64, 56, (4, 8, 12, 16, 24, 32, 40, 48, 64)),
    (128, 256, 28, (16, 24, 32, 64, 96, 128, 192, 256)),
)


def conv_model(cin: int, cout: int, hw: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((cout, cin, 3, 3), dtype=np.float32), "w")
    b = numpy_helper.from_array(np.zeros(cout, dtype=np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["y"], ["z"])
    g = helper.make_graph(
        [node, relu],
        "part",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, cout, hw, hw])],
        [w, b],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def measure_channel_scaling(threads: int, repeats: int, tick=None) -> list[dict]:
    """Rows ``{case, channels, full, seconds}``: median time of each part, interleaved (every
    round times every part once, so a slow spell hits all of them alike)."""
    rows = []
    for case, (cin, full, hw, counts) in enumerate(CASES):
        x = np.random.default_rng(case).random((1, cin, hw, hw), dtype=np.float32)
        sessions = {c: session(conv_model(cin, c, hw), "cpu", threads) for c in counts}
        times: dict[int, list[float]] = {c: [] for c in counts}
        for r in range(repeats + 2):
            for c, s in sessions.items():
                t0 = time.perf_counter()
                s.run(None, {"x": x})
                if r >= 2:
                    times[c].append(time.perf_counter() - t0)
            if tick:
                tick()
        for c in counts:
            rows.append(
                {"case": case, "channels": c, "full": full, "seconds": float(np.median(times[c]))}
            )
    return rows


def part_channels(full: int, block: int) -> list[int]:
    """Output channels of the parts timed for a layer of ``full`` channels, ascending: whole
    blocks nearest above a quarter, a half and three quarters of them, and all of them."""
    out = {full}
    for s in (0.25, 0.5, 0.75):
        c = int(np.ceil(full * s / block)) * block
        if 0 < c < full:
            out.add(c)
    return sorted(out)


def one_layer(layer, node, channels: int, seed: int = 0):
    """``layer`` alone with ``channels`` of its output channels (random weights): one Conv with
    the node's attributes, or one Gemm for a fully connected layer; None for a layer this
    does not cover (grouped convolutions, inputs that are not [batch, features] for a Gemm)."""
    rng = np.random.default_rng(seed)
    x = list(layer.inputs[0].shape)
    attrs = {a.name: a for a in node.attribute}
    if layer.op == "Conv":
        if "group" in attrs and helper.get_attribute_value(attrs["group"]) != 1:
            return None
        w_shape = (channels, *layer.weights[0].shape[1:])
        op = helper.make_node("Conv", ["x", "w", "b"], ["y"])
        op.attribute.extend(a for n, a in attrs.items() if n != "group")
    elif layer.op in ("Gemm", "MatMul") and len(x) == 2:
        w_shape = (channels, x[1])
        op = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    else:
        return None
    w = rng.standard_normal(w_shape, dtype=np.float32) * 0.01
    g = helper.make_graph(
        [op],
        "part",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.zeros(channels, dtype=np.float32), "b"),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


#: The weights (float32 bytes) of the layers timed together by :func:`measure_part_costs`: a
#: layer's models hold 2.5 times its weights (its parts of a quarter, a half and three quarters
#: of its channels, and all of them), so a group's sessions hold about 2.5 times this. A layer
#: heavier than this is timed alone (AlexNet's fc6, 151 MB: about 380 MB of sessions). With
#: all of AlexNet's layers at once, timing them peaked at 1.6 GB (over a 1.5 GB device's
#: memory cap); in these groups, at 1.15 GB.
GROUP_WEIGHT_BYTES = 64 * 2**20


def measure_part_costs(net, block: int, threads: int, repeats: int, seen=None) -> list:
    """Rows ``{key, family, layer, channels, full, seconds}``: each splittable Conv and fully
    connected layer of ``net`` (one per :func:`~models_analytical.layer_costs.layer_key`, none
    of ``seen``) alone, whole and as parts of :func:`part_channels`, median seconds. Layers are
    timed in groups of at most :data:`GROUP_WEIGHT_BYTES` of weights (a heavier one alone),
    interleaved within a group (every round runs every model of the group once; one warm-up
    round); a group's sessions are released before the next group's are made."""
    seen = set() if seen is None else seen
    candidates = []
    for layer in net.graph:
        key = layer_key(layer)
        if not layer.splittable or layer.out_channels < 2 or key in seen:
            continue
        counts = part_channels(layer.out_channels, block)
        if len(counts) < 2:
            continue
        seen.add(key)  # a layer of the same key is covered as this one is: not timed again
        candidates.append((layer, key, counts))
    rows: list[dict] = []
    for group in weight_groups(candidates, GROUP_WEIGHT_BYTES):
        rows += _time_part_group(net, group, threads, repeats)
    return rows


def weight_groups(candidates: list, budget: int) -> list[list]:
    """``candidates`` (``(layer, ...)`` tuples, in order) cut into consecutive groups whose
    layers' weights add up to at most ``budget`` bytes; a heavier layer forms a group alone."""
    groups: list[list] = []
    total = 0
    for c in candidates:
        w = sum(int(np.prod(t.shape)) * 4 for t in c[0].weights)
        if not groups or total + w > budget:
            groups.append([])
            total = 0
        groups[-1].append(c)
        total += w
    return groups


def _time_part_group(net, group: list, threads: int, repeats: int) -> list[dict]:
    """:func:`measure_part_costs`'s rows for one group of ``(layer, key, counts)``: each
    model's session made from it, then the model dropped (the session holds the weights)."""
    cases = []
    for layer, key, counts in group:
        node = net.model.graph.node[layer.node]
        sessions = []
        for c in counts:
            m = one_layer(layer, node, c)
            if m is None:
                break
            sessions.append(session(m, "cpu", threads))
            del m
        if len(sessions) < len(counts):
            continue
        x = np.random.default_rng(layer.index).random(layer.inputs[0].shape, dtype=np.float32)
        cases.append((layer, key, counts, sessions, x))
    runs = [[(s, {"x": x}) for s in sessions] for _, _, _, sessions, x in cases]
    medians = time_interleaved(runs, repeats)
    return [
        {
            "key": key,
            "family": family(layer),
            "layer": f"{net.graph.name}/{layer.name}",
            "channels": c,
            "full": layer.out_channels,
            "seconds": t,
        }
        for (layer, key, counts, _, _), acc in zip(cases, medians, strict=True)
        for c, t in zip(counts, acc, strict=True)
    ]


def time_interleaved(
    runs: list[list[tuple[Any, dict[str, np.ndarray]]]], repeats: int
) -> list[list[float]]:
    """The median seconds of each ``(session, feeds)`` of each case of ``runs``, timed
    interleaved: every round runs every one of every case once, in order (a slow spell of the
    machine hits all of them alike); one warm-up round, then ``repeats`` timed ones."""
    times: list[list[list[float]]] = [[[] for _ in case] for case in runs]
    for r in range(repeats + 1):
        for case, acc in zip(runs, times, strict=True):
            for (s, feeds), t in zip(case, acc, strict=True):
                t0 = time.perf_counter()
                s.run(None, feeds)
                if r >= 1:
                    t.append(time.perf_counter() - t0)
    return [[float(np.median(t)) for t in acc] for acc in times]
