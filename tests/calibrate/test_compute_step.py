"""Calibration's compute step with its units answered by hand (no timing): every network's
layers timed as bands beside its parts, on each device type, fitted into ``row_fixed`` and
written to the file; journaled as every unit is (a refit takes them back without measuring, a
resume measures only the one that is missing); counted by the progress bar."""

from __future__ import annotations

import copy
import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from dse.calibrate import workflow
from dse.calibrate.bands import band_rows
from dse.calibrate.channels import CASES, part_channels
from dse.calibrate.journal import Journal, journal_path
from dse.calibrate.links import link_runs
from dse.calibrate.settings import CalibrationSettings
from dse.calibrate.writer import write
from dse.net import load_net
from models_analytical.coefficients import Coefficients, load_coefficients
from models_analytical.layer_costs import family, layer_key
from tests.helpers.calibrate import platform_localhost
from tests.helpers.platforms import coefficients

NETS = ("alexnet", "vgg16")
#: the share of a layer every band of it pays, by family, in the answers below
SHARES = {"conv": 0.1, "conv_grouped": 0.2, "conv_winograd": 0.3}


class Units:
    """Answers to the compute step's units as a device would give them (layer times of 0.1 ms,
    channel blocks of 8, parts paying 5 %, bands paying ``SHARES``), and the requests asked."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def __call__(self, request: dict) -> dict:
        self.requests.append(copy.deepcopy(request))
        return getattr(self, request["step"])(request)

    def profile(self, r: dict) -> dict:
        n = len(load_net({"name": r["net"]}).graph)
        return {
            "layer_s": [1e-4] * n, "whole_s": [1e-4 * n] * 3, "spread": 0.01, "kernels": n,
            "unmapped": [], "profiled_again": False, "cpu_over_wall": 1.0,
            "machine_before": {}, "machine_after": {},
        }  # fmt: skip

    def channels(self, r: dict) -> dict:
        return {
            "rows": [
                {"case": i, "channels": c, "full": full, "seconds": 1e-4 + 1e-6 * -(-c // 8) * 8}
                for i, (_, full, _, counts) in enumerate(CASES)
                for c in counts
            ]
        }

    def layers(self, r: dict) -> list:
        """The layers of net ``r['net']`` whose keys are not in ``seen``, one per key."""
        seen, out = set(r["seen"]), []
        graph = load_net({"name": r["net"]}).graph
        for layer in graph:
            key = layer_key(layer)
            if key not in seen:
                out.append((layer, key, graph))
                seen.add(key)
        return out

    def parts(self, r: dict) -> dict:
        rows = []
        for layer, key, _ in self.layers(r):
            if not layer.splittable or layer.out_channels < 2:
                continue
            for c in part_channels(layer.out_channels, r["block"]):
                t = 1e-3 * (0.05 + 0.95 * c / layer.out_channels)
                rows.append({"key": key, "family": family(layer), "layer": layer.name,
                             "channels": c, "full": layer.out_channels, "seconds": t})  # fmt: skip
        return {"rows": rows}

    def bands(self, r: dict) -> dict:
        rows = []
        for layer, key, graph in self.layers(r):
            full = int(graph.out_rows[layer.index])
            if not graph.row_splittable[layer.index] or full < 2:
                continue
            f = SHARES[family(layer)]
            for n in band_rows(full):
                t = 2e-3 * (f + (1 - f) * n / full)
                rows.append({"key": key, "family": family(layer), "layer": layer.name,
                             "rows": n, "full": full, "seconds": t})  # fmt: skip
        return {"rows": rows}


def settings(tmp_path) -> CalibrationSettings:
    """Localhost with its second device of another type ('slow'): two types, two networks,
    no deployments."""
    plat = platform_localhost()
    devices = (plat.devices[0], dataclasses.replace(plat.devices[1], type="slow"))
    base = coefficients()["cpu"]
    return CalibrationSettings(
        platform=dataclasses.replace(plat, devices=devices),
        base=Coefficients({"cpu": base, "slow": base}),
        nets=NETS, seed=0, out=tmp_path / "c.json", default_out=False, quick=False,
        profile_runs=1, warmup=0, channel_repeats=1, part_repeats=4, link_few_repeats=False,
        deployments=False, iterations=1, rounds=1, timeout_s=1.0, submodel_runs=1, probe=False,
    )  # fmt: skip


class Counted:
    """The progress bar, counting: its total and its ticks."""

    made: list[Counted] = []

    def __init__(self, total: int) -> None:
        self.total, self.ticks = total, []
        Counted.made.append(self)

    def tick(self, what: str) -> None:
        self.ticks.append(what)

    def close(self) -> None:
        pass


@pytest.fixture
def stubbed(monkeypatch):
    """calibrate() with every unit answered by a :class:`Units` (returned), links not
    measured (a tick per benchmark), the progress bar counted."""
    units = Units()

    def links(platform, few, tick, launcher, take):  # noqa: ANN001, ANN202
        for _ in range(link_runs(platform)):
            tick("link")
        return SimpleNamespace(tables={}, provenance={})

    monkeypatch.setattr(workflow, "unit_runner", lambda platform, device, launcher: (units, True))
    monkeypatch.setattr(workflow, "measure_links", links)
    monkeypatch.setattr(workflow, "Progress", Counted)
    Counted.made.clear()
    return units


def test_every_network_is_timed_as_bands_on_each_type_and_fitted_into_the_file(
    tmp_path, stubbed
) -> None:
    """Per type, one bands unit per network after its parts (the device's threads, the parts'
    repeats, the keys timed before it as seen); the parts' requests keep their form (earlier
    journals' keys still match); per family of three layers or more (alexnet's 3 grouped
    convs, its conv3 and vgg16's 9 distinct 3x3 ones) the bands' share, none for alexnet's one
    11x11 conv; the file keeps it; the progress bar's total is its ticks (3 per network and one
    per type, and the links')."""
    s = settings(tmp_path)
    cal = workflow.calibrate(s)
    steps = [r["step"] for r in stubbed.requests]
    per_type = ["profile", "profile", "channels", "parts", "parts", "bands", "bands"]
    assert steps == per_type * 2
    bands = [r for r in stubbed.requests if r["step"] == "bands"]
    alexnet_keys = list(
        dict.fromkeys(r["key"] for r in stubbed.bands({"net": "alexnet", "seen": []})["rows"])
    )
    assert bands[:2] == [
        {"step": "bands", "net": "alexnet", "threads": 1, "repeats": 4, "seen": []},
        {"step": "bands", "net": "vgg16", "threads": 1, "repeats": 4, "seen": alexnet_keys},
    ]
    assert bands[2:] == bands[:2]
    parts = next(r for r in stubbed.requests if r["step"] == "parts")
    assert set(parts) == {"step", "net", "block", "threads", "repeats", "seen"}
    for dtype in ("cpu", "slow"):
        k = cal.coefficients[dtype]
        assert k.row_fixed == {
            "conv_grouped": pytest.approx(0.2),
            "conv_winograd": pytest.approx(0.3),
        }
        prov = cal.provenance["types"][dtype]["row_fixed"]
        assert prov["layers_per_family"] == {"conv": 1, "conv_grouped": 3, "conv_winograd": 10}
    out, doc = write(cal, s)
    assert doc["slow"]["row_fixed"] == cal.coefficients["slow"].row_fixed
    assert load_coefficients(out)["cpu"].row_fixed == cal.coefficients["cpu"].row_fixed
    (bar,) = Counted.made
    assert len(bar.ticks) == bar.total == 2 * (3 * len(NETS) + 1) + link_runs(s.platform)
    assert sum(t.startswith("cpu: bands of") for t in bar.ticks) == len(NETS)


def test_bands_are_journaled_so_refit_and_resume_take_them_back(tmp_path, stubbed) -> None:
    """A calibration's bands units are in its journal: refit=true fits the same coefficients
    without a unit run; with the last bands unit cut from the journal (a kill), resume=true
    measures that one alone."""
    s = settings(tmp_path)
    journal = Journal(s.out, s.platform, resume=False, refit=False)
    first = workflow.calibrate(s, journal)
    write(first, s)
    journal.finish()
    lines = journal_path(s.out).read_text().splitlines()
    keyed = [json.loads(x) for x in lines[1:-1]]
    in_journal = [json.loads(e["key"]) for e in keyed]
    assert sum(k["step"] == "bands" for k in in_journal) == 4  # 2 types x 2 networks
    assert in_journal[-1]["step"] == "bands" and in_journal[-1]["net"] == "vgg16"
    assert in_journal[-1]["what"] == "compute on localhost_cpu1"  # the 'slow' type's device
    asked = len(stubbed.requests)

    refit = Journal(s.out, s.platform, resume=False, refit=True)
    again = workflow.calibrate(s, refit)
    assert len(stubbed.requests) == asked  # nothing measured
    assert again.coefficients.types == first.coefficients.types

    journal_path(s.out).write_text("\n".join(lines[:-2]) + "\n")  # the last unit, and done
    resumed = Journal(s.out, s.platform, resume=True, refit=False)
    third = workflow.calibrate(s, resumed)
    assert stubbed.requests[asked:] == [{k: v for k, v in in_journal[-1].items() if k != "what"}]
    assert (resumed.taken, resumed.reused) == (1, len(keyed) - 1)
    assert third.coefficients["slow"].row_fixed == first.coefficients["slow"].row_fixed
    assert np.isclose(third.coefficients["slow"].row_fixed["conv_winograd"], 0.3)
