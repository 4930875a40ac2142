"""GoogLeNet / Inception v1 (torchvision layout, no aux heads, ceil-mode max pools)."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder

# Inception modules: (1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5" (a 3x3, as torchvision), pool proj).
INCEPTIONS: dict[str, tuple[int, int, int, int, int, int]] = {
    "inception3a": (64, 96, 128, 16, 32, 32),
    "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64),
    "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64),
    "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128),
    "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}
# Ceil-mode max pool (kernel, stride) inserted before the named module.
POOL_BEFORE: dict[str, tuple[str, int]] = {
    "inception3a": ("maxpool2", 3),
    "inception4a": ("maxpool3", 3),
    "inception5a": ("maxpool4", 2),
}


def _basic_conv(b: NetBuilder, x: str, cout: int, k: int, p: str, stride: int = 1) -> str:
    """torchvision BasicConv2d: conv without bias, BN with eps 1e-3, ReLU."""
    x = b.conv(x, cout, k, stride=stride, pad=k // 2, bias=False, name=f"{p}.conv")
    return b.relu(b.batchnorm(x, eps=1e-3, name=f"{p}.bn"), name=f"{p}.relu")


def _inception(b: NetBuilder, x: str, cfg: tuple[int, ...], p: str) -> str:
    c1, c3r, c3, c5r, c5, cp = cfg
    b1 = _basic_conv(b, x, c1, 1, f"{p}.branch1")
    b2 = _basic_conv(b, _basic_conv(b, x, c3r, 1, f"{p}.branch2.0"), c3, 3, f"{p}.branch2.1")
    b3 = _basic_conv(b, _basic_conv(b, x, c5r, 1, f"{p}.branch3.0"), c5, 3, f"{p}.branch3.1")
    pool = b.maxpool(x, 3, stride=1, pad=1, ceil=True, name=f"{p}.branch4.0")
    b4 = _basic_conv(b, pool, cp, 1, f"{p}.branch4.1")
    return b.concat([b1, b2, b3, b4], name=f"{p}.concat")


def googlenet(b: NetBuilder) -> str:
    x = _basic_conv(b, b.input, 64, 7, "conv1", stride=2)
    x = b.maxpool(x, 3, stride=2, ceil=True, name="maxpool1")
    x = _basic_conv(b, x, 64, 1, "conv2")
    x = _basic_conv(b, x, 192, 3, "conv3")
    for p, cfg in INCEPTIONS.items():
        if p in POOL_BEFORE:
            pool, k = POOL_BEFORE[p]
            x = b.maxpool(x, k, stride=2, ceil=True, name=pool)
        x = _inception(b, x, cfg, p)
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    x = b.dropout(x, name="dropout")
    return b.gemm(x, 1000, name="fc")
