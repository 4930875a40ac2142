"""Channel-share micro-benchmark: how a convolution's time scales with its share of the output
channels (a Layer-Output-Partitioning part), channel blocks included.

CPU kernels compute output channels in blocks (onnxruntime's NCHWc layout: 8 or 16 channels),
so a part of 8 channels can cost as much as one of 16. Each case is a one-Conv model timed at
the device's thread count with the runtime's session settings.
"""

from __future__ import annotations

import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

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


def measure_channel_scaling(threads: int = 1, repeats: int = 15, tick=None) -> list[dict]:
    """Rows ``{case, channels, full, seconds}``: median time of each part, interleaved (every
    round times every part once, so a slow spell hits all of them alike)."""
    from dse.runtime.sessions import session

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
