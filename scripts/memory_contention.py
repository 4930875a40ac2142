"""How much a layer's part slows while the machine's other core computes the other part.

    python scripts/memory_contention.py [--rounds 3] [--seconds 3]

An emulated cluster's boards are one machine: their cores share its memory bus and last-level
cache, where real boards have a memory each. A layer split over two boards runs its parts at
once, each on its own core. This measures, for one layer part of 60 % of the layer's output
(one onnxruntime thread, pinned to CPU 1), its median run time alone and while the other 40 %
runs back to back on CPU 0, in interleaved rounds:

``fc6``
    AlexNet's first fully connected layer (a MatMul of 9216 inputs; 60 % of its 4096 outputs
    is 91 MB of weights, read once per run: bound by memory bandwidth);
``conv``
    a 3 x 3 convolution of 256 channels on 56 x 56 (VGG-16's conv3 layers: bound by compute).

Run it on a quiet machine with no cluster up; it needs ``taskset`` and two CPUs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

LAYERS = ("fc6", "conv")


def layer_model(layer: str, share: float) -> bytes:
    """An ONNX model of ``share`` of the layer's output channels (random weights)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if layer == "fc6":
        n = int(4096 * share)
        w = rng.standard_normal((9216, n), dtype=np.float32)
        node, x_shape, y_shape = helper.make_node("MatMul", ["x", "w"], ["y"]), [1, 9216], [1, n]
    else:
        n = int(256 * share)
        w = rng.standard_normal((n, 256, 3, 3), dtype=np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        x_shape, y_shape = [1, 256, 56, 56], [1, n, 56, 56]
    graph = helper.make_graph(
        [node],
        layer,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def worker(layer: str, share: float, seconds: float) -> None:
    """Run the part back to back for ``seconds``; print its median run time (ms)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(layer_model(layer, share), opts, providers=["CPUExecutionProvider"])
    shape = (1, 9216) if layer == "fc6" else (1, 256, 56, 56)
    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    times, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        sess.run(None, {"x": x})
        times.append(time.perf_counter() - t)
    print(statistics.median(times) * 1e3)


def pinned(cpu: int, layer: str, share: float, seconds: float) -> subprocess.Popen:
    cmd = ["taskset", "-c", str(cpu), sys.executable, __file__, "--worker", layer, str(share),
           str(seconds)]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], float(a.worker[1]), float(a.worker[2]))
        return 0
    got: dict[str, list[tuple[float, float]]] = {layer: [] for layer in LAYERS}
    for r in range(a.rounds):
        for layer in LAYERS:
            alone = float(pinned(1, layer, 0.6, a.seconds).communicate()[0])
            part = pinned(1, layer, 0.6, a.seconds)
            other = pinned(0, layer, 0.4, a.seconds + 0.5)  # outlasts the measured part
            beside = float(part.communicate()[0])
            other.communicate()
            got[layer].append((alone, beside))
        print(f"round {r + 1} of {a.rounds} done", file=sys.stderr, flush=True)
    print("60 % of a layer on CPU 1, alone and while 40 % runs on CPU 0 (median ms per run)")
    print(f"{'layer':6s} {'alone':>8s} {'beside':>8s} {'slower':>7s}  rounds")
    for layer, rows in got.items():
        alone = statistics.median(x for x, _ in rows)
        beside = statistics.median(y for _, y in rows)
        each = " ".join(f"{y / x - 1:+.1%}" for x, y in rows)
        print(f"{layer:6s} {alone:8.2f} {beside:8.2f} {beside / alone - 1:+7.1%}  {each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
