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
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dse.files import scratch
from dse.net.onnx_load import point_external
from dse.runtime.rank.sessions import session
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


def one_layer(layer, node, channels: int, seed: int = 0, weights: Path | None = None):
    """``layer`` alone with ``channels`` of its output channels (random weights): one Conv with
    the node's attributes, or one Gemm for a fully connected layer; None for a layer this
    does not cover (grouped convolutions, inputs that are not [batch, features] for a Gemm).
    The weights of ``c`` channels are the first ``c`` rows of the whole layer's (one seeded
    draw, in row order). With ``weights`` (a file :func:`write_weights` wrote for the whole
    layer), the model reads its rows from there as external data, and holds none itself."""
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
    if weights is None:
        w = numpy_helper.from_array(random_weights(w_shape, seed), "w")
    else:
        w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=w_shape)
        point_external(w, weights.name, 0, int(np.prod(w_shape)) * 4)
    g = helper.make_graph(
        [op],
        "part",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, numpy_helper.from_array(np.zeros(channels, dtype=np.float32), "b")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def random_weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The seeded weights :func:`one_layer` gives a layer of ``shape`` (drawn in place)."""
    w = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    w *= np.float32(0.01)
    return w


def write_weights(layer, path: Path, seed: int = 0) -> None:
    """The whole ``layer``'s weights of :func:`one_layer` into ``path`` (raw float32)."""
    x = list(layer.inputs[0].shape)
    rest = layer.weights[0].shape[1:] if layer.op == "Conv" else (x[1],)
    random_weights((layer.out_channels, *rest), seed).tofile(path)


#: The weights (float32 bytes) of the layers timed together by :func:`measure_part_costs`: a
#: layer's models hold 2.5 times its weights (its parts of a quarter, a half and three quarters
#: of its channels, and all of them), so a group's sessions hold about 2.5 times this. A layer
#: heavier than this is timed alone (AlexNet's fc6, 151 MB: about 380 MB of sessions). All of
#: a network's layers at once can exceed a device's memory cap.
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
        w = weight_bytes(c[0])
        if not groups or total + w > budget:
            groups.append([])
            total = 0
        groups[-1].append(c)
        total += w
    return groups


def _time_part_group(net, group: list, threads: int, repeats: int) -> list[dict]:
    """:func:`measure_part_costs`'s rows for one group of ``(layer, key, counts)``, timed
    interleaved; a group that is one layer heavier than :data:`GROUP_WEIGHT_BYTES` has its
    models timed one after another instead, each session released before the next is made
    (its models together hold 2.5 times its weights: AlexNet's fc6, 380 MB, does not fit a
    512 MB device)."""
    heavy = len(group) == 1 and weight_bytes(group[0][0]) > GROUP_WEIGHT_BYTES
    cases = []
    with scratch("parts-") as tmp:
        for layer, key, counts in group:
            paths = _part_models(layer, net.model.graph.node[layer.node], counts, tmp)
            if paths is None:
                continue
            x = np.random.default_rng(layer.index).random(layer.inputs[0].shape, dtype=np.float32)
            cases.append((layer, key, counts, paths, x))
        if heavy:
            medians = [[_time_alone(p, x, threads, repeats) for p in ps] for *_, ps, x in cases]
        else:
            runs = [[(session(p, "cpu", threads), {"x": x}) for p in ps] for *_, ps, x in cases]
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


def _part_models(layer, node, counts: list[int], directory: Path) -> list[Path] | None:
    """``layer``'s models of ``counts`` channels (:func:`one_layer`) written into
    ``directory``, all reading their rows of one file of the layer's weights
    (:func:`write_weights`): making them holds no copy of the weights beyond what the
    sessions keep (made in memory and handed over, the weights pass through several copies);
    None for a layer not covered."""
    weights = directory / f"{layer.index}.bin"
    if one_layer(layer, node, counts[0], weights=weights) is None:
        return None
    write_weights(layer, weights)
    paths = []
    for c in counts:
        paths.append(directory / f"{layer.index}-{c}.onnx")
        onnx.save(one_layer(layer, node, c, weights=weights), paths[-1])
    return paths


def _time_alone(path: Path, x: np.ndarray, threads: int, repeats: int) -> float:
    """The median seconds of the model at ``path`` alone (:func:`time_interleaved` of one)."""
    s = session(path, "cpu", threads)
    return time_interleaved([[(s, {"x": x})]], repeats)[0][0]


def weight_bytes(layer) -> int:
    """A layer's weights, float32 bytes."""
    return sum(int(np.prod(t.shape)) * 4 for t in layer.weights)


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
