"""Compare dse's per-layer MACs and params with onnx-tool, an independent counter.

    python scripts/compare_macs.py MODEL.onnx [1,3,640,640]
    python scripts/compare_macs.py --zoo          # every zoo net, materialized to the cache

Prints, for the layers both tools count the same way (Conv, ConvTranspose, Gemm, MatMul and
their quantized forms, LSTM/GRU), the totals of each tool and the largest per-layer
difference. Elementwise ops are left out: onnx-tool counts them differently (e.g. about 15
per element for BatchNormalization where dse counts one multiply-add).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

PRODUCT_OPS = {
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "ConvInteger",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "LSTM",
    "GRU",
    "RNN",
}


def compare(path: str, input_shape: list[int] | None) -> dict:
    import onnx_tool

    from dse.net import load_net

    g = load_net({"name": "onnx", "path": path, "input_shape": input_shape}).graph
    m = onnx_tool.Model(path, {"verbose": False})
    if input_shape is not None:
        name = g.inputs[0].name
        m.graph.shape_infer({name: np.zeros(input_shape, dtype=np.float32)})
    else:
        m.graph.shape_infer()
    m.graph.profile()
    theirs = {n.name: float(np.sum(n.macs)) for n in m.graph.nodemap.values()}
    ours = {layer.name: layer.macs for layer in g if layer.op in PRODUCT_OPS}
    common = [k for k in ours if k in theirs]
    worst = max(common, key=lambda k: abs(ours[k] - theirs[k]) / max(theirs[k], 1), default=None)
    return {
        "model": path,
        "layers_compared": len(common),
        "layers_missing_in_onnx_tool": len(ours) - len(common),
        "dse_product_macs": sum(ours[k] for k in common),
        "onnx_tool_product_macs": sum(theirs[k] for k in common),
        "worst_layer": worst,
        "worst_rel_diff": (abs(ours[worst] - theirs[worst]) / max(theirs[worst], 1))
        if worst
        else 0,
        "dse_params": g.totals()["params"],
        "onnx_tool_params": int(m.graph.params),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("input_shape", nargs="?", type=json.loads)
    ap.add_argument("--zoo", action="store_true", help="compare every zoo network")
    args = ap.parse_args()
    if args.zoo:
        from dse.net.zoo import NETS, materialize

        targets = [(str(materialize(n)), None) for n in NETS]
    elif args.model:
        targets = [(args.model, args.input_shape)]
    else:
        ap.error("give a model path or --zoo")
    for path, shape in targets:
        r = compare(path, shape)
        diff = r["dse_product_macs"] / max(r["onnx_tool_product_macs"], 1) - 1
        print(
            f"{r['model'].rsplit('/', 1)[-1]}: {r['layers_compared']} product layers, "
            f"dse {r['dse_product_macs']:,.0f} vs onnx-tool {r['onnx_tool_product_macs']:,.0f} "
            f"MACs ({diff:+.3%}), worst layer {r['worst_layer']} {r['worst_rel_diff']:+.2%}; "
            f"params dse {r['dse_params']:,} vs onnx-tool {r['onnx_tool_params']:,}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
