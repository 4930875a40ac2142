"""ResNet-50 v1.5 (torchvision layout): bottlenecks with the stride on the 3x3 conv."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder

# (bottleneck width, blocks, stride of the first block) for layer1..layer4.
RESNET50_LAYERS: tuple[tuple[int, int, int], ...] = (
    (64, 3, 1),
    (128, 4, 2),
    (256, 6, 2),
    (512, 3, 2),
)
EXPANSION = 4


def _conv_bn(b: NetBuilder, x: str, cout: int, k: int, stride: int, conv: str, bn: str) -> str:
    x = b.conv(x, cout, k, stride=stride, pad=k // 2, bias=False, name=conv)
    return b.batchnorm(x, name=bn)


def _bottleneck(b: NetBuilder, x: str, width: int, stride: int, p: str) -> str:
    cout = width * EXPANSION
    y = b.relu(_conv_bn(b, x, width, 1, 1, f"{p}.conv1", f"{p}.bn1"), name=f"{p}.relu1")
    y = b.relu(_conv_bn(b, y, width, 3, stride, f"{p}.conv2", f"{p}.bn2"), name=f"{p}.relu2")
    y = _conv_bn(b, y, cout, 1, 1, f"{p}.conv3", f"{p}.bn3")
    if stride != 1 or b.chw(x)[0] != cout:
        x = _conv_bn(b, x, cout, 1, stride, f"{p}.downsample.0", f"{p}.downsample.1")
    return b.relu(b.add(y, x, name=f"{p}.add"), name=f"{p}.relu")


def resnet50(b: NetBuilder) -> str:
    x = b.relu(_conv_bn(b, b.input, 64, 7, 2, "conv1", "bn1"), name="relu")
    x = b.maxpool(x, 3, stride=2, pad=1, name="maxpool")
    for i, (width, blocks, stride) in enumerate(RESNET50_LAYERS, start=1):
        for j in range(blocks):
            x = _bottleneck(b, x, width, stride if j == 0 else 1, f"layer{i}.{j}")
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    return b.gemm(x, 1000, name="fc")
