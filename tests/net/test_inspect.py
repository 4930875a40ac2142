"""`python -m dse.inspect`: output formats, zoo totals, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.net import load_net
from tests.helpers.cli import run_module

# Published trained-parameter counts and Conv+FC multiply-accumulates at 224x224.
PUBLISHED = {
    "alexnet": (60_965_224, 724e6),
    "vgg16": (138_357_544, 15.47e9),
    "resnet50": (25_557_032, 4.09e9),
    "mobilenetv2": (3_504_872, 300e6),
    "densenet121": (7_978_856, 2.87e9),
    "googlenet": (6_624_904, 1.50e9),
}


def inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("dse.inspect", *args)


@pytest.mark.parametrize("net", sorted(PUBLISHED))
def test_zoo_totals_match_published(net):
    g = load_net({"name": net}).graph
    params, macs = PUBLISHED[net]
    assert g.totals()["params"] == params
    conv_fc = int(g.macs[[op in ("Conv", "Gemm") for op in g.ops]].sum())
    assert abs(conv_fc - macs) / macs < 0.03
    assert not g.estimated.any()


def test_alexnet_is_the_thesis_24_layer_network():
    g = load_net({"name": "alexnet"}).graph
    assert len(g) == 24
    assert g.ops.count("Conv") == 5 and g.ops.count("Gemm") == 3
    assert int(g.splittable.sum()) == 8


def test_json_output():
    r = inspect("+net=alexnet", "format=json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["totals"] == {
        "macs": load_net({"name": "alexnet"}).graph.totals()["macs"],
        "params": 60_965_224,
        "weight_bytes": 60_965_224 * 4,
        "layers": 24,
    }
    first = doc["layers"][0]
    assert {k: first[k] for k in ("name", "op", "output_shape", "splittable")} == {
        "name": "conv1",
        "op": "Conv",
        "output_shape": [1, 96, 54, 54],
        "splittable": True,
    }
    assert first["macs"] == 96 * 54 * 54 * 3 * 11 * 11
    assert first["params"] == 96 * 3 * 11 * 11 + 96


def test_table_output():
    r = inspect("+net=vgg16")
    assert r.returncode == 0, r.stderr
    assert "138,357,544 params" in r.stdout
    assert r.stdout.count("\n") > 40


def test_onnx_file_with_dynamic_shape(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c")]
    m = f.model(nodes, {"x": ["N", 3, "H", "W"]}, ["y"], [f.weight("w", [2, 3, 1, 1])])
    path = tmp_path / "dyn.onnx"
    onnx.save(m, path)
    r = inspect("+net=onnx", f"net.path={path}", "net.input_shape=[1,3,5,5]", "format=json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["layers"][0]["macs"] == 2 * 25 * 3
    r = inspect("+net=onnx", f"net.path={path}")
    assert r.returncode == 2
    assert "input 'x' has dynamic shape [N,3,H,W]" in r.stderr


def bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xfe not protobuf \x00")
    empty = tmp_path / "empty.onnx"
    onnx.save(f.model([], {"x": [1]}, []), empty)
    mystery = tmp_path / "mystery.onnx"
    m = f.model(
        [helper.make_node("Mystery", ["x"], ["y"], domain="com.example")], {"x": [1, 3]}, ["y"]
    )
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, mystery)
    return {
        "missing file": (["+net=onnx", f"net.path={tmp_path / 'nope.onnx'}"], "not found"),
        "not onnx": (["+net=onnx", f"net.path={junk}"], "not an ONNX model"),
        "no nodes": (["+net=onnx", f"net.path={empty}"], "has no nodes"),
        "uninferable": (["+net=onnx", f"net.path={mystery}"], "cannot be inferred"),
        "unknown zoo name": (["+net=lenet"], "choose one of alexnet, densenet121"),
        "no net": ([], "no network given"),
        "onnx without path": (["+net=onnx"], "net.path"),
        "bad format": (["+net=alexnet", "format=xml"], "unknown format"),
    }


BAD_CASES = [
    "missing file",
    "not onnx",
    "no nodes",
    "uninferable",
    "unknown zoo name",
    "no net",
    "onnx without path",
    "bad format",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_line(case, tmp_path):
    cases = bad_inputs(tmp_path)
    assert sorted(cases) == sorted(BAD_CASES)
    args, expected = cases[case]
    r = inspect(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in r.stderr
