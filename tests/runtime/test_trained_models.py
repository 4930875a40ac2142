"""Trained models as their packages export them (a classifier, an OCR text detector, a YOLOv8n
detector whose head computes shapes at run time), split vertically, by channels and by rows:
on a real photograph, the deployment's outputs equal the whole model's in plain onnxruntime."""

from __future__ import annotations

import pytest

from dse.runtime.compile.partition import partition
from dse.runtime.launch.local import run_deployment
from tests.helpers.platforms import platform
from tests.helpers.serving import Whole, assert_same
from tests.helpers.trained import MODELS, as_input, mapping, model_path, photos, trained_net


@pytest.mark.parametrize("model", sorted(MODELS))
def test_trained_models_split_every_way_equal_the_whole_model(model: str) -> None:
    net, whole = trained_net(model), Whole(model_path(model))
    name = net.model.graph.input[0].name
    x = {name: as_input(photos()["china.jpg"], tuple(net.input_shape[2:]))}
    want = whole(x)
    for kind in ("vertical", "channels", "rows"):
        dep = partition(net, mapping(net, kind), platform(2))
        assert_same(run_deployment(dep, x), want)
