"""Does half a layer cost half? Each Conv and fully connected layer of a zoo network, alone.

For every Conv and Gemm of the network with at least two output channels, this builds two
one-node models with the layer's real input shape, attributes and (random) weights: one with
all its output channels, one with half (whole blocks of 16 channels from 32 channels up, as a
Layer-Output-Partitioning part would have). It times them alternately in this process (one
thread, the runtime's session options; 2 warm-up and ``--runs`` timed rounds) and prints, per
network, part time / (share x whole time) weighted by the whole layer's time, and the six
costliest layers. A ratio of 1.00 means a part costs exactly its share.

    python scripts/split_parts.py alexnet resnet50 [--runs 5]

Measured 2026-11-24 (22 s), weighted by time: AlexNet 1.025, VGG-16 1.006, ResNet-50 1.017,
DenseNet-121 1.146 (its 32-channel 3x3 convolutions: 1.28 for 16 channels). AlexNet's, VGG-16's
and ResNet-50's layers alone scale with their share. So the 13-25 % more compute of ResNet-50's
split mappings under MPI (docs/fidelity.md, run K) comes from what surrounds the parts, not from
the layers. DenseNet-121's small convolutions cost more than their share.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper, shape_inference

from dse.net import load_net
from dse.runtime.sessions import session


def one_layer(node, in_shape: list[int], w_shape: list[int], half: bool):
    """A one-node model of ``node`` (Conv, or Gemm with transB=1) and its output channels."""
    full = w_shape[0]
    if not half:
        c = full
    elif full >= 32:
        c = int(np.ceil(full / 2 / 16)) * 16
    else:
        c = int(np.ceil(full / 2))
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c, *w_shape[1:]), dtype=np.float32) * 0.01
    if node.op_type == "Conv":
        op = helper.make_node("Conv", ["x", "w", "b"], ["y"])
        op.attribute.extend(node.attribute)
    else:
        op = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    graph = helper.make_graph(
        [op],
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(c, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, c


def layers(name: str):
    """(layer name, output channels, part channels, whole session, part session, input)."""
    model = shape_inference.infer_shapes(load_net({"name": name}).model)
    values = list(model.graph.value_info) + list(model.graph.input)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    rng = np.random.default_rng(1)
    for node in model.graph.node:
        if node.op_type == "Gemm":
            if not any(a.name == "transB" and a.i == 1 for a in node.attribute):
                continue
        elif node.op_type != "Conv":
            continue
        w_shape = weights.get(node.input[1])
        if w_shape is None or w_shape[0] < 2:
            continue
        in_shape = shapes[node.input[0]]
        whole, _ = one_layer(node, in_shape, w_shape, half=False)
        part, c = one_layer(node, in_shape, w_shape, half=True)
        x = rng.random(in_shape, dtype=np.float32)
        yield node.name, w_shape[0], c, session(whole, "cpu", 1), session(part, "cpu", 1), x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("nets", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    for name in a.nets:
        cases = list(layers(name))
        t_whole = [[] for _ in cases]
        t_part = [[] for _ in cases]
        for r in range(a.runs + 2):
            for i, (_, _, _, s_whole, s_part, x) in enumerate(cases):
                for s, acc in ((s_whole, t_whole), (s_part, t_part)):
                    t0 = time.perf_counter()
                    s.run(None, {"x": x})
                    if r >= 2:
                        acc[i].append(time.perf_counter() - t0)
        whole = np.array([np.median(t) for t in t_whole])
        part = np.array([np.median(t) for t in t_part])
        share = np.array([c[2] / c[1] for c in cases])
        ratio = part / (share * whole)
        weighted = float(np.sum(whole / whole.sum() * ratio))
        p10, p50, p90 = np.percentile(ratio, [10, 50, 90])
        print(
            f"{name}: {len(cases)} layers, {whole.sum() * 1e3:.1f} ms whole; part / (share x "
            f"whole): {weighted:.3f} weighted by time, median {p50:.3f}, p10-p90 "
            f"{p10:.3f}-{p90:.3f}"
        )
        for i in np.argsort(-whole)[:6]:
            n, full, c = cases[i][:3]
            print(
                f"  {n:28s} {c:5d} of {full:5d} channels  whole {whole[i] * 1e3:7.2f} ms  "
                f"part / (share x whole) {ratio[i]:.3f}"
            )


if __name__ == "__main__":
    main()
