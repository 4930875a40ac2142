"""DenseNet-121 (torchvision layout) with exporter-style Concat of all earlier block features."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder

GROWTH, BN_SIZE, INIT_FEATURES = 32, 4, 64
DENSENET121_BLOCKS: tuple[int, ...] = (6, 12, 24, 16)


def _bn_relu_conv(b: NetBuilder, x: str, cout: int, k: int, p: str, i: str) -> str:
    x = b.relu(b.batchnorm(x, name=f"{p}.norm{i}"), name=f"{p}.relu{i}")
    return b.conv(x, cout, k, pad=k // 2, bias=False, name=f"{p}.conv{i}")


def _dense_block(b: NetBuilder, x: str, layers: int, p: str) -> str:
    features = [x]
    for j in range(1, layers + 1):
        q = f"{p}.denselayer{j}"
        y = b.concat(features, name=f"{q}.concat") if len(features) > 1 else x
        y = _bn_relu_conv(b, y, BN_SIZE * GROWTH, 1, q, "1")
        features.append(_bn_relu_conv(b, y, GROWTH, 3, q, "2"))
    return b.concat(features, name=f"{p}.concat")


def _transition(b: NetBuilder, x: str, p: str) -> str:
    x = b.relu(b.batchnorm(x, name=f"{p}.norm"), name=f"{p}.relu")
    x = b.conv(x, b.chw(x)[0] // 2, 1, bias=False, name=f"{p}.conv")
    return b.avgpool(x, 2, stride=2, name=f"{p}.pool")


def densenet121(b: NetBuilder) -> str:
    x = b.conv(b.input, INIT_FEATURES, 7, stride=2, pad=3, bias=False, name="features.conv0")
    x = b.relu(b.batchnorm(x, name="features.norm0"), name="features.relu0")
    x = b.maxpool(x, 3, stride=2, pad=1, name="features.pool0")
    for i, layers in enumerate(DENSENET121_BLOCKS, start=1):
        x = _dense_block(b, x, layers, f"features.denseblock{i}")
        if i < len(DENSENET121_BLOCKS):
            x = _transition(b, x, f"features.transition{i}")
    x = b.relu(b.batchnorm(x, name="features.norm5"), name="features.relu5")
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    return b.gemm(x, 1000, name="classifier")
