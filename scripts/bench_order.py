"""Time loading graphs of many parallel branches: the memory-aware order must stay near-linear.

    python scripts/bench_order.py [BRANCHES ...]   (default: 1000 2000 4000)

Each graph is one input feeding BRANCHES branches of two layers (Relu -> Sigmoid) joined by a
Concat, so a graph of B branches has 2B + 1 layers. Prints, per size, the load time with the
memory-aware order (``net.order=memory``) and as stored (``net.order=file``), and the two peaks.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from dse.net import load_net
from dse.net.order import peak_memory


def branches(n: int) -> onnx.ModelProto:
    """x [1, 64, 8, 8] -> n x (Relu -> Sigmoid) -> Concat, stored breadth first."""
    relus = [helper.make_node("Relu", ["x"], [f"r{i}"], name=f"r{i}") for i in range(n)]
    sigs = [helper.make_node("Sigmoid", [f"r{i}"], [f"s{i}"], name=f"s{i}") for i in range(n)]
    cat = helper.make_node("Concat", [f"s{i}" for i in range(n)], ["y"], name="cat", axis=1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([*relus, *sigs, cat], "branches", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("branches", nargs="*", type=int, default=[1000, 2000, 4000])
    sizes = ap.parse_args().branches
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"branches{n}.onnx"
            onnx.save(branches(n), path)
            times, peaks = {}, {}
            for order in ("file", "memory"):
                t = time.perf_counter()
                g = load_net({"name": "onnx", "path": str(path), "order": order}).graph
                times[order] = time.perf_counter() - t
                peaks[order] = peak_memory(g, range(len(g)))
            print(
                f"{n} branches ({2 * n + 1} layers): memory order {times['memory']:.2f} s, "
                f"file order {times['file']:.2f} s; peak {peaks['memory'] / 1e6:.2f} MB "
                f"against {peaks['file'] / 1e6:.2f} MB as stored"
            )


if __name__ == "__main__":
    main()
