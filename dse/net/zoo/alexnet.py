"""AlexNet as in Caffe/BVLC (the ONNX model zoo's bvlc_alexnet): 24 nodes, grouped convs."""

from __future__ import annotations

from dse.net.zoo.builder import NetBuilder


def alexnet(b: NetBuilder) -> str:
    x = b.conv(b.input, 96, 11, stride=4, name="conv1")
    x = b.relu(x, name="relu1")
    x = b.lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0, name="norm1")
    x = b.maxpool(x, 3, stride=2, pad=(0, 0, 1, 1), name="pool1")  # 54 -> 27
    x = b.conv(x, 256, 5, pad=2, groups=2, name="conv2")
    x = b.relu(x, name="relu2")
    x = b.lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0, name="norm2")
    x = b.maxpool(x, 3, stride=2, pad=(0, 0, 1, 1), name="pool2")  # 27 -> 13
    x = b.conv(x, 384, 3, pad=1, name="conv3")
    x = b.relu(x, name="relu3")
    x = b.conv(x, 384, 3, pad=1, groups=2, name="conv4")
    x = b.relu(x, name="relu4")
    x = b.conv(x, 256, 3, pad=1, groups=2, name="conv5")
    x = b.relu(x, name="relu5")
    x = b.maxpool(x, 3, stride=2, pad=(0, 0, 1, 1), name="pool5")  # 13 -> 6
    x = b.flatten(x, name="flatten")  # 256 * 6 * 6 = 9216
    x = b.dropout(b.relu(b.gemm(x, 4096, name="fc6"), name="relu6"), name="drop6")
    x = b.dropout(b.relu(b.gemm(x, 4096, name="fc7"), name="relu7"), name="drop7")
    x = b.gemm(x, 1000, name="fc8")
    return b.softmax(x, name="prob")
