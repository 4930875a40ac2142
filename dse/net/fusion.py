"""Which layers onnxruntime's CPU provider runs inside another layer's kernel.

onnxruntime rewrites a model before running it: an activation or a BatchNormalization right
after a convolution becomes part of the convolution's kernel, an Add of a convolution's output
(NCHWc layout) its sum input, and x * Sigmoid(x) (SiLU) one QuickGelu kernel named after the
Mul. A layer so absorbed has no time of its own: a profile shares its kernel's time among its
members by a prior (:mod:`dse.calibrate.profile`), and the model costs it with its own family,
``fused`` (:func:`cost_family`), so that an activation run alone (after an Add, a Resize) is
not fitted with those run inside a Conv.

The rules, in layer order (a layer's producer is the layer making its first input):

* a Conv or ConvTranspose is *conv-like*;
* Identity and Dropout are removed: fused, conv-like when their producer is;
* a Sigmoid whose one consumer is a Mul of its input and itself (SiLU) is fused into that Mul;
* an activation of :data:`CONV_ACTIVATIONS` or a BatchNormalization whose producer is conv-like
  and has no other consumer is fused (a BatchNormalization stays conv-like: an activation after
  it joins the same kernel);
* an Add of two tensors, one made by a conv-like layer of a multiple of
  :data:`NCHWC_BLOCK` output channels with no other consumer, is fused and conv-like.

Checked against onnxruntime's own profiles of the zoo and three exported models
(``tests/net/test_fusion.py``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from dse.net.graph import LayerGraph
from dse.net.ops import family

CONV_OPS = frozenset({"Conv", "ConvTranspose"})
#: Activations onnxruntime fuses into the convolution before them.
CONV_ACTIVATIONS = frozenset(
    {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish"}
)
#: The channel block of onnxruntime's NCHWc layout, whose convolutions take an Add as their sum.
NCHWC_BLOCK = 8
#: The cost family of a fused layer.
FUSED = "fused"


def fused_layers(graph: LayerGraph) -> np.ndarray:
    """Per layer, whether onnxruntime runs it inside another layer's kernel (the module's
    rules)."""
    consumers: dict[int, list[int]] = defaultdict(list)
    for src, dst in zip(graph.edge_src, graph.edge_dst, strict=True):
        if src >= 0:
            consumers[int(src)].append(int(dst))
    fused = np.zeros(len(graph), dtype=bool)
    conv_like = np.zeros(len(graph), dtype=bool)
    for i, layer in enumerate(graph):
        made_by = [graph.producer.get(t.name) for t in layer.inputs]
        first = made_by[0] if made_by else None

        def alone(p: int | None) -> bool:
            return p is not None and len(consumers[p]) == 1

        if layer.op in CONV_OPS:
            conv_like[i] = True
        elif layer.op in ("Identity", "Dropout"):
            fused[i] = True
            conv_like[i] = first is not None and conv_like[first]
        elif layer.op == "Sigmoid" and _silu(graph, i, consumers):
            fused[i] = True
        elif layer.op in CONV_ACTIVATIONS | {"BatchNormalization"}:
            if alone(first) and first is not None and conv_like[first]:
                fused[i] = True
                conv_like[i] = layer.op == "BatchNormalization"
        elif layer.op == "Add" and len(layer.inputs) == 2:
            for p in made_by:
                if (
                    p is not None
                    and conv_like[p]
                    and alone(p)
                    and graph.layers[p].out_channels % NCHWC_BLOCK == 0
                ):
                    fused[i] = conv_like[i] = True
                    break
    return fused


def _silu(graph: LayerGraph, i: int, consumers: dict[int, list[int]]) -> bool:
    """Whether layer ``i`` (a Sigmoid) feeds one Mul of its own input and itself."""
    if len(consumers[i]) != 1:
        return False
    layer, mul = graph.layers[i], graph.layers[consumers[i][0]]
    return mul.op == "Mul" and {t.name for t in mul.inputs} == {
        layer.inputs[0].name,
        layer.outputs[0].name,
    }


def cost_families(graph: LayerGraph) -> list[str]:
    """Per layer, the family its time is fitted and predicted in: :data:`FUSED` for a fused
    layer, else its op's (:func:`dse.net.ops.family`)."""
    fused = fused_layers(graph)
    return [FUSED if fused[i] else family(layer) for i, layer in enumerate(graph)]
