"""VGG-16 (configuration D): thirteen 3x3 convs in five stages, three fully connected layers."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder

# Output channels of each conv, stage by stage; every stage ends with a 2x2/2 max pool.
VGG16_STAGES: tuple[tuple[int, ...], ...] = (
    (64, 64),
    (128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (512, 512, 512),
)


def vgg16(b: NetBuilder) -> str:
    x = b.input
    for s, stage in enumerate(VGG16_STAGES, start=1):
        for i, cout in enumerate(stage, start=1):
            x = b.conv(x, cout, 3, pad=1, name=f"conv{s}_{i}")
            x = b.relu(x, name=f"relu{s}_{i}")
        x = b.maxpool(x, 2, stride=2, name=f"pool{s}")
    x = b.flatten(x, name="flatten")  # 512 * 7 * 7 = 25088
    x = b.dropout(b.relu(b.gemm(x, 4096, name="fc6"), name="relu6"), name="drop6")
    x = b.dropout(b.relu(b.gemm(x, 4096, name="fc7"), name="relu7"), name="drop7")
    x = b.gemm(x, 1000, name="fc8")
    return b.softmax(x, name="prob")
