"""MobileNetV2 (width 1.0, torchvision layout): inverted residuals with ReLU6 as Clip."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder

# Inverted residual settings: expansion t, output channels c, repeats n, first stride s.
MOBILENETV2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
STEM, HEAD = 32, 1280


def _conv_bn_relu6(
    b: NetBuilder, x: str, cout: int, k: int, stride: int, p: str, groups: int = 1
) -> str:
    """Conv (no bias) + BN + ReLU6, named like torchvision's Conv2dNormActivation: p.0/.1/.2."""
    x = b.conv(x, cout, k, stride=stride, pad=k // 2, groups=groups, bias=False, name=f"{p}.0")
    return b.relu6(b.batchnorm(x, name=f"{p}.1"), name=f"{p}.2")


def _inverted_residual(b: NetBuilder, x: str, t: int, cout: int, stride: int, p: str) -> str:
    cin = b.chw(x)[0]
    hidden = cin * t
    y, i = x, 0
    if t != 1:
        y, i = _conv_bn_relu6(b, y, hidden, 1, 1, f"{p}.conv.0"), 1
    y = _conv_bn_relu6(b, y, hidden, 3, stride, f"{p}.conv.{i}", groups=hidden)
    y = b.conv(y, cout, 1, bias=False, name=f"{p}.conv.{i + 1}")  # linear bottleneck
    y = b.batchnorm(y, name=f"{p}.conv.{i + 2}")
    return b.add(x, y, name=f"{p}.add") if stride == 1 and cin == cout else y


def mobilenetv2(b: NetBuilder) -> str:
    x = _conv_bn_relu6(b, b.input, STEM, 3, 2, "features.0")
    idx = 1
    for t, c, n, s in MOBILENETV2_SETTINGS:
        for j in range(n):
            x = _inverted_residual(b, x, t, c, s if j == 0 else 1, f"features.{idx}")
            idx += 1
    x = _conv_bn_relu6(b, x, HEAD, 1, 1, f"features.{idx}")
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    x = b.dropout(x, name="classifier.0")
    return b.gemm(x, 1000, name="classifier.1")
