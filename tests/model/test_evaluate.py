"""`python -m dse.evaluate`: a hand-written mapping scored from the command line, and bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dse.net import load_net
from models_analytical.coefficients import QUICK, UNCALIBRATED
from tests.helpers.cli import ROOT, run_module


def evaluate(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("dse.evaluate", *args)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mapping")
    g = load_net({"name": "alexnet"}).graph
    names = list(g.names)
    whole = d / "whole.json"
    whole.write_text(json.dumps({"xavier0_cpu": names}))
    split = d / "split.json"
    split.write_text(json.dumps({"xavier0_cpu": names, "xavier1_cpu": ["fc6"]}))
    horizontal = d / "horizontal.json"
    horizontal.write_text(json.dumps({"fc6": ["lop", [2048], ["xavier0_cpu", "xavier1_cpu"]]}))
    bad_node = d / "bad_node.json"
    bad_node.write_text(json.dumps({"xavier0_cpu": [*names, "conv9"]}))
    bad_device = d / "bad_device.json"
    bad_device.write_text(json.dumps({"xavier0_cpu": names, "pluto_cpu": ["fc6"]}))
    bad_coeff = d / "coefficients.json"
    coeff = json.loads((ROOT / "conf/platform/jetson_xavier_nx.json").read_text())
    del coeff["cpu"]["layer_overhead_s"]
    bad_coeff.write_text(json.dumps(coeff))
    return {
        "whole": whole,
        "split": split,
        "horizontal": horizontal,
        "bad_node": bad_node,
        "bad_device": bad_device,
        "bad_coeff": bad_coeff,
    }


def test_unpartitioned_alexnet_matches_table2_as_json(files):
    r = evaluate("+net=alexnet", f"mapping={files['whole']}", "format=json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["latency_ms"] == pytest.approx(28.3, rel=1e-3)
    assert doc["energy_j"]["xavier0_cpu"] == pytest.approx(0.352, rel=1e-3)
    assert doc["memory_mb"]["xavier0_cpu"] == pytest.approx(152.7, rel=0.05)
    assert doc["feasible"] is True
    assert list(doc["memory_mb"]) == ["xavier0_cpu"]


def test_split_fc6_moves_its_input_and_half_its_output(files):
    r = evaluate(
        "+net=alexnet",
        f"mapping={files['split']}",
        f"horizontal={files['horizontal']}",
        "format=json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # fc6's 9216-float input goes to xavier1; its 2048 channels come back to xavier0
    assert doc["bytes_sent"] == {"xavier0_cpu": 9216 * 4, "xavier1_cpu": 2048 * 4}
    table = evaluate(
        "+net=alexnet", f"mapping={files['split']}", f"horizontal={files['horizontal']}"
    )
    assert "xavier1_cpu" in table.stdout and "feasible" in table.stdout


@pytest.mark.parametrize(
    ("case", "extra", "message"),
    [
        ("bad_node", [], "unknown node 'conv9'"),
        ("bad_device", [], "unknown device 'pluto_cpu'"),
        ("whole", ["platform.coefficients={bad_coeff}"], "cpu: 'layer_overhead_s' is missing"),
        ("whole", ["~platform.links.network"], "no link figures for 'network'"),
        (
            "whole",
            ["platform.resources.cpu.memory_mb=null"],
            "resources.cpu.memory_mb: expected a number, not null",
        ),
        ("whole", ["platform=mars"], "unknown platform 'mars'"),
        ("missing", [], "mapping file not found"),
    ],
)
def test_bad_input_is_one_line(files, case, extra, message):
    mapping = files.get(case, Path("/nonexistent/mapping.json"))
    args = [a.format(**files) for a in extra]
    r = evaluate("+net=alexnet", f"mapping={mapping}", *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


def test_the_coefficients_are_named_with_how_they_were_obtained(files, tmp_path):
    """The table says which coefficients scored the mapping and how they were obtained, the
    JSON too: a quick calibration (a smoke test) is not passed off as a calibration."""
    doc = json.loads((ROOT / "conf/platform/jetson_xavier_nx.json").read_text())
    doc |= {"calibrated": True, "provenance": {"date": "2026-05-09T12:00:00+00:00"}}
    doc["provenance"] |= {"host": "board7", "quick": True}
    quick = tmp_path / "quick.json"
    quick.write_text(json.dumps(doc))
    args = ("+net=alexnet", f"mapping={files['whole']}")
    table = run_module("dse.evaluate", *args, f"coefficients={quick}", env={"TZ": "UTC"})
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1] == (
        f"coefficients: {quick} (calibrated (quick: a smoke test) on board7 2026-05-09 12:00; "
        "not for predictions: calibrate without quick=true)"
    )
    r = evaluate(*args, f"coefficients={quick}", "format=json")
    out = json.loads(r.stdout)
    assert (out["coefficients"], out["calibration"]) == (str(quick), QUICK)
    shipped = json.loads(evaluate(*args, "format=json").stdout)
    assert shipped["coefficients"] == str(ROOT / "conf/platform/jetson_xavier_nx.json")
    assert shipped["calibration"] == UNCALIBRATED
