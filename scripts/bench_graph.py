"""Time building the layer graph of every zoo net, and of a 2.4 GB model with external data.

    python scripts/bench_graph.py

Prints one line per network, `NET: T ms (L layers)`, the median of 5 builds in this process
(the very first build, which warms caches, is reported apart).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from dse.net import load_net
from dse.net.zoo import NETS


def big_external_model(directory: Path) -> Path:
    """Three 4096x49152 Gemms (2.4 GB of float32) whose weights live in a sparse file."""
    n_in, n_out = 49152, 4096
    inits, nodes, offset = [], [], 0
    x = "x"
    for i in range(3):
        w = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[n_out, n_in])
        w.data_location = TensorProto.EXTERNAL
        for k, v in (
            ("location", "weights.bin"),
            ("offset", str(offset)),
            ("length", str(n_out * n_in * 4)),
        ):
            entry = w.external_data.add()
            entry.key, entry.value = k, v
        offset += n_out * n_in * 4
        inits.append(w)
        nodes.append(helper.make_node("Gemm", [x, f"w{i}"], [f"y{i}"], transB=1, name=f"fc{i}"))
        nodes.append(helper.make_node("Tile", [f"y{i}", "reps"], [f"t{i}"], name=f"tile{i}"))
        x = f"t{i}"
    inits.append(onnx.numpy_helper.from_array(np.array([1, 12], dtype=np.int64), "reps"))
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_in])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = directory / "big.onnx"
    onnx.save(model, path)
    with open(directory / "weights.bin", "wb") as fh:  # sparse: takes no disk space
        fh.truncate(offset)
    return path


def timed(net: dict) -> tuple[float, int]:
    t0 = time.perf_counter()
    g = load_net(net).graph
    return time.perf_counter() - t0, len(g)


def main() -> None:
    cold, _ = timed({"name": NETS[0]})
    print(f"first build ({NETS[0]}): {cold * 1e3:.0f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        big = big_external_model(Path(tmp))
        size = (Path(tmp) / "weights.bin").stat().st_size
        nets = [{"name": n} for n in NETS]
        nets.append({"name": "onnx", "path": str(big)})
        for net in nets:
            runs = [timed(net) for _ in range(5)]
            label = net["name"] if net["name"] != "onnx" else f"external {size / 1e9:.1f} GB"
            print(
                f"{label}: {statistics.median(r[0] for r in runs) * 1e3:.1f} ms "
                f"({runs[0][1]} layers)"
            )


if __name__ == "__main__":
    main()
