"""The layers dse.net.fusion says onnxruntime runs inside another's kernel are those its own
profiler shows in one kernel with a convolution (dse.calibrate.profile's fusion groups), on zoo
networks and trained models as their packages export them."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from dse.calibrate.ondevice import model_file
from dse.calibrate.profile import attribute, fusion_groups, kernel_runs
from dse.net import Net, load_net, zoo
from dse.net.fusion import CONV_OPS, FUSED, cost_families, fused_layers
from dse.runtime.rank.sessions import session_options
from tests.helpers.trained import MODELS, model_path


def with_a_conv(net: Net, path: Path, tmp_path: Path) -> np.ndarray:
    """Per layer, whether onnxruntime's profile puts it in one kernel with a convolution."""
    opts = session_options("cpu", 1)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "p")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros(i.shape, np.float32) for i in sess.get_inputs()}
    sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    timed, _ = attribute(kernel_runs(events)[0], net.graph)
    groups = defaultdict(list)
    for i, anchor in enumerate(fusion_groups(net.graph, timed > 0)):
        groups[int(anchor)].append(i)
    out = np.zeros(len(net.graph), dtype=bool)
    for anchor, members in groups.items():
        if anchor >= 0 and any(net.graph.layers[m].op in CONV_OPS for m in members):
            out[members] = [net.graph.layers[m].op not in CONV_OPS for m in members]
    return out


def disagreements(net: Net, path: Path, tmp_path: Path) -> dict[tuple[str, bool], int]:
    """(op, what the rule says) -> layers where the rule and the profile differ; Identity and
    Dropout left out (removed by onnxruntime: no kernel either way)."""
    rule, seen = fused_layers(net.graph), with_a_conv(net, path, tmp_path)
    out: dict[tuple[str, bool], int] = defaultdict(int)
    for i, layer in enumerate(net.graph):
        if rule[i] != seen[i] and layer.op not in ("Identity", "Dropout"):
            out[(layer.op, bool(rule[i]))] += 1
    return dict(out)


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2", "googlenet", "densenet121"])
def test_the_zoo_fuses_as_onnxruntime_does(name: str, tmp_path: Path) -> None:
    net = load_net({"name": name})
    assert disagreements(net, zoo.materialize(name, 0, external=True), tmp_path) == {}


@pytest.mark.parametrize(
    ("key", "known"),
    [
        ("ocr_det", {}),
        ("detector", {}),  # its 57 SiLU: Sigmoid fused, the Mul onnxruntime's QuickGelu kernel
        # MobileNetV3's Add after a Conv of 40 channels, and activations after an Identity
        ("orientation", {("Add", False): 4, ("Relu", False): 2, ("HardSigmoid", False): 2}),
    ],
)
def test_exported_models_fuse_as_onnxruntime_does(key: str, known: dict, tmp_path: Path) -> None:
    cfg = {"name": "onnx", "path": str(model_path(key)), "input_shape": MODELS[key][2]}
    net = load_net(cfg)
    path = model_file({"net": net.name, "net_config": cfg, "seed": 0})
    assert disagreements(net, path, tmp_path) == known


def test_a_fused_layer_is_costed_in_its_own_family() -> None:
    """YOLOv8's 57 SiLU: each Sigmoid fused, each Mul in its family (arith); the head's one
    Sigmoid of the class scores runs alone (activation)."""
    from collections import Counter

    from tests.helpers.trained import trained_net

    net = trained_net("detector")
    fams = Counter(
        (layer.op, fam) for layer, fam in zip(net.graph, cost_families(net.graph), strict=True)
    )
    assert fams[("Sigmoid", FUSED)] == 57 and fams[("Sigmoid", "activation")] == 1
    assert fams[("Mul", "arith")] == 58  # 57 SiLU and the head's stride
