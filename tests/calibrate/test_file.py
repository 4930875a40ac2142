"""The calibrated coefficients file: what calibration writes reads back, in its layout."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dse.calibrate.settings import CalibrationSettings
from dse.calibrate.workflow import Calibration
from dse.calibrate.writer import write
from dse.errors import DseError
from models_analytical.coefficients import Coefficients, load_coefficients
from tests.helpers.calibrate import platform_localhost
from tests.helpers.platforms import coefficients


def test_coefficients_round_trip_with_calibrated_fields(tmp_path) -> None:
    cpu = dataclasses.replace(
        coefficients()["cpu"],
        layer_s={"abc": 1e-3},
        regression={"conv": (1e-5, 2e-11, 3e-12, 4e-12)},
        channel_block=16,
        part_fixed={"abc": 0.3},
        part_fixed_channels={"conv": 9.0},
        transfer_fixed_s=1e-4,
        transfer_per_byte_s=1e-10,
    )
    cpu = dataclasses.replace(
        cpu,
        memory=dataclasses.replace(
            cpu.memory, weights={"conv": 2.0, "other": 1.0}, loading={"conv": 2.5, "other": 1.5}
        ),
    )
    c = Coefficients(
        {"cpu": cpu}, calibrated=True, links={"x": {"bytes": [1, 2], "seconds": [0, 1]}}
    )
    path = tmp_path / "c.json"
    path.write_text(json.dumps(c.to_dict()))
    back = load_coefficients(path)
    assert back["cpu"] == cpu and back.links == c.links and back.calibrated
    raw = c.to_dict()
    raw["cpu"]["part_fixed"] = [["abc", 0.3]]
    path.write_text(json.dumps(raw))
    with pytest.raises(Exception, match=r"cpu\.part_fixed: expected an object, not a list"):
        load_coefficients(path)
    raw = c.to_dict()
    raw["cpu"]["part_fixed"]["abc"] = 1.2
    path.write_text(json.dumps(raw))
    with pytest.raises(Exception, match=r"part_fixed\.abc: 1\.2 is out of range: expected below 1"):
        load_coefficients(path)
    raw = c.to_dict()
    raw["links"]["x"]["bytes"] = [2, 1]
    path.write_text(json.dumps(raw))
    with pytest.raises(Exception, match="links.x: 'bytes' must increase"):
        load_coefficients(path)


def _settings(tmp_path, quick: bool = False) -> CalibrationSettings:
    """Settings as a calibration of localhost would have them (only what the writer reads
    matters here)."""
    return CalibrationSettings(
        platform=platform_localhost(),
        base=coefficients(),
        nets=("alexnet",),
        seed=0,
        out=tmp_path / "out" / "c.json",
        default_out=False,
        quick=quick,
        profile_runs=1,
        warmup=0,
        channel_repeats=1,
        part_repeats=1,
        link_few_repeats=quick,
        deployments=True,
        iterations=1,
        rounds=1,
        timeout_s=1.0,
        submodel_runs=1,
        probe=True,
    )


def test_the_file_is_written_from_the_coefficients_in_its_layout(tmp_path) -> None:
    """The file keeps its layout: description, calibrated, energy, provenance (the steps',
    then the run's), each kind, links, speed_reference; it reads back to the same
    coefficients, calibrated."""
    cpu = dataclasses.replace(
        coefficients()["cpu"], layer_s={"abc": 1e-3}, part_fixed={"abc": 0.3}, channel_block=8
    )
    links = {"same_host": {"bytes": [64, 256], "seconds": [1e-6, 2e-6]}}
    reference = {"whole_ms": {"alexnet": 40.0}, "threads": 1}
    c = Coefficients({"cpu": cpu}, "calibration", links=links, notes={"speed_reference": reference})
    steps = {"kinds": {"cpu": {"threads": 1}}, "links": {}, "memory": {"rows": 2}}
    out, doc = write(Calibration(c, steps, 12.34), _settings(tmp_path, quick=True))
    assert out == tmp_path / "out" / "c.json" and json.loads(out.read_text()) == doc
    assert list(doc) == [
        "description",
        "calibrated",
        "energy",
        "provenance",
        "cpu",
        "links",
        "speed_reference",
    ]
    assert doc["description"].endswith("for platform 'localhost' (quick: a smoke test, not for "
                                       "predictions)")  # fmt: skip
    prov = doc["provenance"]
    assert list(prov) == [*steps, "date", "host", "versions", "nets", "quick", "seconds"]
    assert prov["nets"] == ["alexnet"] and prov["quick"] is True and prov["seconds"] == 12.3
    assert doc["cpu"] == cpu.to_dict() and doc["links"] == links
    back = load_coefficients(out)
    assert back.calibrated and back["cpu"] == cpu and back.links == links
    assert back.notes["speed_reference"] == reference
    assert back.quick and back.calibration == "calibrated (quick: a smoke test)"


def test_how_coefficients_were_obtained_in_the_words_every_output_uses() -> None:
    """Not calibrated, calibrated, or calibrated by quick=true (its provenance says so); a
    file that is not calibrated is never quick, whatever its provenance says."""
    cpu = {"cpu": coefficients()["cpu"]}
    words = {
        (calibrated, quick): Coefficients(
            cpu, calibrated=calibrated, notes={"provenance": {"quick": quick}}
        ).calibration
        for calibrated in (False, True)
        for quick in (False, True)
    }
    assert words == {
        (False, False): "uncalibrated",
        (False, True): "uncalibrated",
        (True, False): "calibrated",
        (True, True): "calibrated (quick: a smoke test)",
    }
    assert Coefficients(cpu, calibrated=True).calibration == "calibrated"  # no provenance


def test_a_file_that_would_not_read_back_is_not_written(tmp_path) -> None:
    """A part's fixed share of 1.2 (not a share): one clear error, and no file."""
    cpu = dataclasses.replace(coefficients()["cpu"], part_fixed={"abc": 1.2})
    s = _settings(tmp_path)
    with pytest.raises(DseError, match=r"part_fixed\.abc: 1\.2 is out of range: expected below 1"):
        write(Calibration(Coefficients({"cpu": cpu}), {"kinds": {}}, 1.0), s)
    assert not s.out.exists()
