"""opmix: the layers exported detectors and OCR models are made of and the six classic networks
lack, for calibration to profile (``dse.calibrate``'s default networks include it).

Four stages (112, 56, 28 and 14 rows; 16 to 128 channels), each: a strided 3x3 convolution;
HardSwish written out as exporters write it, ``x * Clip(x + 3, 0, 6) / 6`` (Add, Clip, Div, Mul
each run alone); a depthwise 3x3 convolution with HardSwish; a squeeze-and-excitation gate
(global pooling, two 1x1 convolutions, HardSigmoid, a broadcast Mul); a 1x1 convolution with
SiLU (``x * Sigmoid(x)``); a residual Add. Then a feature pyramid, three levels of: a
nearest or bilinear Resize, a Concat, a transposed convolution and a Softmax over channels, as
a detection head has. Every op family of :mod:`dse.net.ops` bound by bytes moved appears
alone and at several sizes, so their regressions are fitted on the target
(:mod:`models_analytical.layer_fits`).
"""

from __future__ import annotations

from dse.net.zoo.builder import Fill, NetBuilder

#: (channels, rows after the stage's strided convolution)
STAGES = ((16, 112), (32, 56), (64, 28), (128, 14))


def _scalar(b: NetBuilder, name: str, value: float) -> str:
    return b._param(name, (1,), Fill("const", value))


def _hardswish_by_hand(b: NetBuilder, x: str, *, name: str) -> str:
    shape = b.shapes[x]
    t = b._node("Add", [x, _scalar(b, f"{name}.three", 3.0)], shape, f"{name}.add")
    lo, hi = _scalar(b, f"{name}.lo", 0.0), _scalar(b, f"{name}.hi", 6.0)
    t = b._node("Clip", [t, lo, hi], shape, f"{name}.clip")
    t = b._node("Div", [t, _scalar(b, f"{name}.six", 6.0)], shape, f"{name}.div")
    return b._node("Mul", [x, t], shape, f"{name}.mul")


def _stage(b: NetBuilder, x: str, channels: int, i: int) -> str:
    s = f"s{i}"
    x = b.conv(x, channels, 3, stride=2, pad=1, name=f"{s}.down")
    x = _hardswish_by_hand(b, x, name=f"{s}.hs")
    skip = x
    x = b.conv(x, channels, 3, pad=1, groups=channels, name=f"{s}.dw")
    x = b._node("HardSwish", [x], b.shapes[x], f"{s}.dw_hs")
    # squeeze and excitation: a per-channel gate multiplied in (a broadcast Mul)
    g = b.global_avgpool(x, name=f"{s}.se_pool")
    g = b.relu(b.conv(g, max(channels // 4, 8), 1, name=f"{s}.se_reduce"), name=f"{s}.se_relu")
    g = b.conv(g, channels, 1, name=f"{s}.se_expand")
    g = b._node("HardSigmoid", [g], b.shapes[g], f"{s}.se_gate", alpha=1 / 6, beta=0.5)
    x = b._node("Mul", [x, g], b.shapes[x], f"{s}.se_mul")
    x = b.conv(x, channels, 1, name=f"{s}.pw")
    sig = b._node("Sigmoid", [x], b.shapes[x], f"{s}.silu_sigmoid")
    x = b._node("Mul", [x, sig], b.shapes[x], f"{s}.silu")
    return b.add(x, skip, name=f"{s}.residual")


def opmix(b: NetBuilder) -> str:
    x = b.input
    feats = []
    for i, (channels, _) in enumerate(STAGES):
        x = _stage(b, x, channels, i)
        feats.append(x)
    # a feature pyramid's top-down path, level by level: upsample, join, mix; then a head's
    # transposed convolution and softmax over channels, pooled back into a gate of the level
    for level, mode in ((2, "nearest"), (1, "linear"), (0, "nearest")):
        p = f"fpn{level}"
        c, h, w = b.chw(feats[level])
        x = b.conv(x, c, 1, name=f"{p}.lateral")
        scales = b._param(f"{p}.up.scales", (4,), Fill("scales", 2.0))
        x = b._node("Resize", [x, "", scales], (c, h, w), f"{p}.up", mode=mode)
        x = b.concat([x, feats[level]], name=f"{p}.join")
        x = b.relu(b.conv(x, c, 3, pad=1, name=f"{p}.mix"), name=f"{p}.mix_relu")
        wt = b._param(f"{p}.head.weight", (c, c, 2, 2), Fill("he", c * 4))
        t = b._node("ConvTranspose", [x, wt], (c, 2 * h, 2 * w), f"{p}.head", kernel_shape=[2, 2],
                    strides=[2, 2])  # fmt: skip
        t = b.softmax(t, name=f"{p}.softmax")
        t = b.maxpool(t, 2, stride=2, name=f"{p}.pool")
        x = b._node("Mul", [x, t], (c, h, w), f"{p}.gate")
    return x
