"""Hostile settings, platforms and coefficients: every bad value is refused where it enters,
in one line naming the file or key, never a traceback or a silently wrong number."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from dse.errors import DseError
from dse.platform import load_platform
from models_analytical.coefficients import Coefficients, load_coefficients
from tests.helpers.cli import ROOT
from tests.helpers.hostile import assert_one_line, run_all

PLATFORMS = ROOT / "conf" / "platform"


def localhost() -> dict:
    return yaml.safe_load((PLATFORMS / "localhost.yaml").read_text())


def xavier() -> dict:
    return yaml.safe_load((PLATFORMS / "jetson_xavier_nx_x8.yaml").read_text())


def coefficients() -> dict:
    return json.loads((PLATFORMS / "jetson_xavier_nx.json").read_text())


def setting(doc: dict, path: str, value: object) -> dict:
    """``doc`` with the value at ``a.b.0.c`` replaced (or deleted for ``...``)."""
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    key = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return doc


NAN, INF = float("nan"), float("inf")

#: (base platform, key, bad value or ... to delete it, words of the one line)
PLATFORM_CASES = [
    (
        "localhost",
        "devices.0.memory_mb",
        0,
        "devices[0].memory_mb: 0 is out of range: expected above 0",
    ),
    ("localhost", "devices.0.memory_mb", -5, "memory_mb: -5 is out of range: expected above 0"),
    ("localhost", "devices.0.memory_mb", NAN, "memory_mb: expected a finite number, not nan"),
    ("localhost", "devices.0.memory_mb", "lots", "memory_mb: expected a number, not text"),
    ("localhost", "devices.0.memory_mb", True, "memory_mb: expected a number, not true/false"),
    ("localhost", "devices.0.threads", 0, "threads: 0 is out of range: expected at least 1"),
    ("localhost", "devices.0.threads", 1.5, "threads: expected an integer, not a number"),
    ("localhost", "devices.0.kind", "tpu", 'devices[0].kind: expected cpu or gpu, not "tpu"'),
    ("localhost", "devices.0.host", ..., "devices[0]: 'host' is missing"),
    ("localhost", "devices.1.name", "localhost_cpu0", "duplicate device names (localhost_cpu0)"),
    ("localhost", "devices", "abc", "devices: expected a list, not text"),
    ("localhost", "devices", {"a": 1}, "devices: expected a list, not an object"),
    ("localhost", "devices.0", 7, "devices[0]: expected an object, not an integer"),
    ("localhost", "links.same_host.bandwidth_Bps", NAN, "bandwidth_Bps: expected a finite"),
    ("localhost", "links.same_host.bandwidth_Bps", 0, "same_host.bandwidth_Bps: 0 is out of range"),
    ("localhost", "links.same_host.bandwidth_Bps", INF, "bandwidth_Bps: expected a finite"),
    (
        "localhost",
        "links.same_host.latency_s",
        -1e-6,
        "latency_s: -1e-06 is out of range: expected at least 0",
    ),
    ("localhost", "links.same_host.energy_J_per_byte", -1, "energy_J_per_byte: -1 is out of range"),
    ("localhost", "links.same_host", 5, "links.same_host: expected an object, not an integer"),
    ("localhost", "links.same_host", ..., "no link figures for 'same_host'"),
    ("localhost", "links", "same_host", "links: expected an object, not text"),
    ("localhost", "entry", "pluto_cpu", "entry device 'pluto_cpu'"),
    ("localhost", "weights", "maybe", 'weights: expected resident or streamed, not "maybe"'),
    ("localhost", "shared_network", "no", "shared_network: expected true or false, not text"),
    ("localhost", "pairs", "ab", "pairs: expected a list, not text"),
    (
        "localhost",
        "pairs",
        [{"a": "localhost_cpu0", "b": "mars"}],
        "pairs[0]: 'latency_s' is missing",
    ),
    (
        "localhost",
        "pairs",
        [{"a": "localhost_cpu0", "b": "mars", "latency_s": 0, "bandwidth_Bps": 1}],
        "pairs[0]: unknown device 'localhost_cpu0' or 'mars'",
    ),
    (
        "localhost",
        "pairs",
        [{"a": "localhost_cpu0", "b": "localhost_cpu1", "latency_s": 0, "bandwidth_Bps": -1}],
        "pairs[0].bandwidth_Bps: -1 is out of range: expected above 0",
    ),
    ("xavier", "hosts", "xavier0", "hosts: expected a list, not text"),
    ("xavier", "resources", ["cpu"], "resources: expected an object, not a list"),
    ("xavier", "resources.cpu", "fast", "resources.cpu: expected an object, not text"),
    ("xavier", "resources.gpu.memory_mb", ..., "resources.gpu: 'memory_mb' is missing"),
    (
        "xavier",
        "resources.gpu.memroy_mb",
        1,
        "resources.gpu: unknown key 'memroy_mb' (did you mean",
    ),
    (
        "xavier",
        "devices",
        [{"host": "a", "kind": "cpu", "memory_mb": 1}],
        "either devices or hosts",
    ),
    (
        "xavier",
        "links.netwrok",
        {"latency_s": 0, "bandwidth_Bps": 1},
        'links: key "netwrok": expected',
    ),
    (
        "xavier",
        "links.network.bandwidth_Bps",
        -1.12e8,
        "network.bandwidth_Bps: -1.12e+08 is out of",
    ),
]


@pytest.mark.parametrize("case", PLATFORM_CASES, ids=lambda c: f"{c[1]}={c[2]!r}")
def test_bad_platform_values_are_refused_naming_the_key(case):
    base, key, value, words = case
    doc = setting(localhost() if base == "localhost" else xavier(), key, value)
    with pytest.raises(DseError) as err:
        load_platform(doc)
    text = str(err.value)
    assert words in text and "\n" not in text, text
    assert f"platform '{doc['name']}'" in text


def test_a_platform_that_is_not_a_mapping_is_refused():
    for doc in (None, "localhost", [1, 2], 5):
        with pytest.raises(DseError, match="^platform: expected an object, not "):
            load_platform(doc)  # type: ignore[arg-type]


#: (key in the cpu section of the coefficients, bad value or ..., words of the one line)
COEFFICIENT_CASES = [
    ("frequency_hz", 0, "cpu.frequency_hz: 0 is out of range: expected at least 1000 Hz"),
    ("frequency_hz", -1e9, "frequency_hz: -1e+09 is out of range: expected at least 1000 Hz"),
    ("frequency_hz", NAN, "frequency_hz: expected a finite number, not nan"),
    ("frequency_hz", INF, "frequency_hz: expected a finite number, not inf"),
    ("frequency_hz", "fast", "frequency_hz: expected a number, not text"),
    ("frequency_hz", True, "frequency_hz: expected a number, not true/false"),
    ("layer.conv", 0, "layer.conv: 0 is out of range: expected at least 1e-06 MAC/cycle"),
    ("layer.fc", -0.5, "layer.fc: -0.5 is out of range: expected at least 1e-06"),
    ("layer.elementwise", NAN, "layer.elementwise: expected a finite"),
    ("layer", [1, 2], "cpu.layer: expected an object, not a list"),
    ("layer.conv_winograd", ..., "cpu.layer: 'conv_winograd' is missing"),
    ("layer_overhead_s", -1e-5, "layer_overhead_s: -1e-05 is out of range: expected at least 0 s"),
    ("memory.coefficient", 0, "memory.coefficient: 0 is out of range: expected above 0"),
    ("memory.coefficient", -1, "memory.coefficient: -1 is out of range: expected above 0"),
    ("memory.bias_mb", -100, "memory.bias_mb: -100 is out of range: expected at least 0 MB"),
    ("memory.per_layer_mb", -0.1, "memory.per_layer_mb: -0.1 is out of range"),
    ("memory", "lots", "cpu.memory: expected an object, not text"),
    ("power_w.idle", -1, "power_w.idle: -1 is out of range: expected at least 0 W"),
    ("power_w.conv", NAN, "power_w.conv: expected a finite"),
    ("power_w.overhead", ..., "cpu.power_w: 'overhead' is missing"),
]


@pytest.mark.parametrize("case", COEFFICIENT_CASES, ids=lambda c: f"{c[0]}={c[1]!r}")
def test_bad_coefficients_are_refused_naming_the_file_and_key(case):
    key, value, words = case
    raw = coefficients()
    raw["cpu"] = setting(raw["cpu"], key, value)
    with pytest.raises(DseError) as err:
        Coefficients.from_dict(raw, "bad.json")
    text = str(err.value)
    assert "coefficients bad.json" in text and words in text, text
    assert "\n" not in text


def test_coefficients_that_are_not_an_object_are_refused(tmp_path):
    for raw, words in ((None, "must be a JSON object"), ([1], "must be a JSON object")):
        with pytest.raises(DseError, match=words):
            Coefficients.from_dict(raw, "bad.json")
    with pytest.raises(DseError, match="no device type section"):
        Coefficients.from_dict({"cpus": {}}, "bad.json")
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"cpu": \xff}')
    with pytest.raises(DseError, match="not UTF-8 text"):
        load_coefficients(path)


#: Settings on the command line (dse.inspect composes the whole tree) -> words of the one line
SETTINGS = {
    "seed=abc": "seed",
    "seed=1.5": "seed",
    "seed=-1": "seed=-1",
    "seed=4294967296": "seed=4294967296",
    "algorithm.checkpoint_every=0": "checkpoint_every=0",
    "chromosome.splits=0": "chromosome.splits=0",
    "algorithm.crossover.prob=5": "prob=5",
    "algorithm.mutation.eta=-50": "eta=-50",
    "algorithm.pop_size=1": "pop_size=1",
    "objectives=[latency,latency]": "name one objective twice",
    "objectives=latency": "objectives",
    "objectives=[speed]": "unknown objective 'speed'",
    "model_threads=0": "model_threads=0",
    "platform.links.same_host={latency_s:": "cannot read the command line",
    "platform.devices=abc": "devices: expected a list",
}
#: Settings of the platform, which dse.evaluate loads: localhost (2 CPUs, one host).
NEEDS_LOCALHOST = ("platform.links.same_host={latency_s:", "platform.devices=abc")


def test_bad_settings_are_one_line_each(tmp_path):
    bad = coefficients()
    bad["cpu"]["frequency_hz"] = 0
    path = tmp_path / "zero_frequency.json"
    path.write_text(json.dumps(bad))
    unused = f"mapping={tmp_path / 'unused.json'}"  # the platform fails before it is read
    cases = {
        s: ("dse.evaluate", ["+net=alexnet", "platform=localhost", unused, s])
        if s in NEEDS_LOCALHOST
        else ("dse.inspect", ["+net=alexnet", s])
        for s in SETTINGS
    }
    cases["coefficients"] = ("dse.evaluate", ["+net=alexnet", f"coefficients={path}", unused])
    results = run_all(cases)
    failed = []
    for key, r in results.items():
        words = ("zero_frequency.json", "frequency_hz: 0 is out of range: expected at least")
        try:
            assert_one_line(r, *(words if key == "coefficients" else (SETTINGS[key],)))
        except AssertionError as exc:
            failed.append(f"case '{key}': {exc}")
    assert not failed, "\n".join(failed)


def test_command_line_mistakes_around_runs_and_sweeps_are_one_line(tmp_path) -> None:
    """resume= naming a file or nothing, the sweeper Hydra users know by another name, sweep
    parameters as a dict on the command line: one line each, naming the fix."""
    a_file = tmp_path / "summary.json"
    a_file.write_text("{}")
    sweep = ["--multirun", "hydra/sweeper=dse_optuna", "+net=alexnet"]
    cases = {
        "resume a file": ("dse", [f"resume={a_file}"]),
        "resume nothing": ("dse", [f"resume={tmp_path / 'gone'}"]),
        "optuna sweeper": ("dse", ["--multirun", "hydra/sweeper=optuna", "+net=alexnet"]),
        "params on the command line": (
            "dse",
            [*sweep, "hydra.sweeper.params={algorithm.pop_size:range(10,20)}"],
        ),
    }
    words = {
        "resume a file": ("is a file", "run's directory"),
        "resume nothing": ("nothing to resume",),
        "optuna sweeper": ("hydra/sweeper=dse_optuna",),
        "params on the command line": ("config files", "range(100,501,100)"),
    }
    for case, r in run_all(cases).items():
        assert_one_line(r, *words[case])
