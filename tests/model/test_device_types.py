"""Coefficients per device type: each device read with its own type's (compute, overheads,
memory, power), against figures worked out by hand; speed shares follow the types."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import yaml
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.errors import DseError
from dse.mapping import from_device_lists, rules
from dse.net.build import build_graph
from dse.paths import CONF_DIR
from dse.platform import Device, Link, Platform, load_platform
from models_analytical.coefficients import (
    OP_CLASSES,
    Coefficients,
    Memory,
    TypeCoefficients,
    load_coefficients,
)
from models_analytical.model import AnalyticalModel

MB = 1e6


def of_type(
    freq: float, overhead: float, power: float, overhead_w: float, idle: float, bias: float
):
    """Every op class at ``freq`` MAC/s (a 1e6-element Relu: 1e6 / freq s), memory = bias +
    live bytes."""
    return TypeCoefficients(
        frequency_hz=freq,
        layer={c: 1.0 for c in OP_CLASSES},
        layer_overhead_s=overhead,
        memory=Memory(coefficient=1.0, bias_mb=bias, per_layer_mb=0.0),
        power_w={**{c: power for c in OP_CLASSES}, "overhead": overhead_w, "idle": idle},
    )


FAST = of_type(1e6, 0.1, 10.0, 3.0, 1.0, 10.0)
SLOW = of_type(0.5e6, 0.3, 4.0, 5.0, 2.0, 20.0)


def two_boards(types: tuple[str, str]) -> Platform:
    """Two cpus (one kind) on two boards, 1 MB/s between them, of the given types."""
    devices = tuple(
        Device(f"h{i}_cpu", f"h{i}", "cpu", 1, 1e4, type=t) for i, t in enumerate(types)
    )
    return Platform("t", devices, {"network": Link(0.0, MB)}, entry=0)


def relu_chain():
    """r0 -> r1, 1e6 float32 each (4 MB)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["t1"], name="r0"),
        helper.make_node("Relu", ["t1"], ["t2"], name="r1"),
    ]
    return build_graph(f.model(nodes, {"x": [1_000_000]}, ["t2"]), "chain")


def test_two_devices_of_one_kind_and_two_types_each_compute_with_their_own():
    # r0 on h0 (fast): 1 s + 0.1 s overhead; 4 MB to h1 at 1 MB/s: 4 s; r1 on h1 (slow):
    # 2 s + 0.3 s overhead. Latency 1.1 + 4 + 2.3 = 7.4 s.
    g = relu_chain()
    coeff = Coefficients({"fast": FAST, "slow": SLOW})
    model = AnalyticalModel(g, two_boards(("fast", "slow")), coeff)
    ev = model.evaluate(from_device_lists(g, 2, [[[0], [1]]]))
    assert ev.latency_s[0] == pytest.approx(7.4)
    assert ev.busy_s[0].tolist() == pytest.approx([1.1, 2.3])
    # energy: work x its power + overhead x overhead power + idle (7.4 - busy) x idle power
    assert ev.energy_j[0].tolist() == pytest.approx(
        [1 * 10 + 0.1 * 3 + 6.3 * 1, 2 * 4 + 0.3 * 5 + 5.1 * 2]
    )
    # memory: bias + 4 MB kept for good (the input image on h0, what h1 receives) + the 4 MB
    # output each makes
    assert ev.memory_mb[0].tolist() == pytest.approx([10 + 4 + 4, 20 + 4 + 4])
    # the other way round, each device keeps its own type's figures: r0 on h1 2.3 s, r1 on h0
    # 1.1 s (the image crosses first: 4 s), latency 4 + 2.3 + 4 + 1.1
    back = model.evaluate(from_device_lists(g, 2, [[[1], [0]]]))
    assert back.latency_s[0] == pytest.approx(11.4)
    assert back.busy_s[0].tolist() == pytest.approx([1.1, 2.3])


def test_the_type_not_the_kind_decides():
    # the same two devices, both of type fast: r1 takes 1.1 s instead of 2.3 s
    g = relu_chain()
    coeff = Coefficients({"fast": FAST, "slow": SLOW})
    model = AnalyticalModel(g, two_boards(("fast", "fast")), coeff)
    ev = model.evaluate(from_device_lists(g, 2, [[[0], [1]]]))
    assert ev.latency_s[0] == pytest.approx(1.1 + 4 + 1.1)
    assert ev.memory_mb[0].tolist() == pytest.approx([18, 18])


def test_a_type_without_coefficients_is_one_line_naming_it():
    coeff = Coefficients({"fast": FAST, "slow": SLOW})
    with pytest.raises(DseError) as err:
        AnalyticalModel(relu_chain(), two_boards(("fast", "medium")), coeff)
    text = str(err.value)
    assert "no 'medium' section" in text and "h1_cpu" in text and "add a 'medium' section" in text
    assert "(its types: fast, slow)" in text and "\n" not in text


def test_a_device_type_defaults_to_its_kind_and_is_read_from_the_platform_file():
    assert Device("h_cpu", "h", "cpu", 1, 1.0).type == "cpu"
    cfg = {
        "name": "p",
        "devices": [
            {"name": "a_cpu", "host": "a", "kind": "cpu", "memory_mb": 100},
            {"name": "a_gpu", "host": "a", "kind": "gpu", "memory_mb": 100, "type": "volta"},
        ],
        "links": {"cpu_gpu": {"latency_s": 0, "bandwidth_Bps": 1e9}},
    }
    plat = load_platform(cfg)
    assert [d.type for d in plat.devices] == ["cpu", "volta"] and plat.types == ["cpu", "volta"]
    cfg["devices"][1]["type"] = "volta 2"
    with pytest.raises(DseError, match=r"devices\[1\]\.type: 'volta 2' must be a name of letters"):
        load_platform(cfg)


def test_a_coefficients_file_is_keyed_by_type_beside_its_notes():
    fast = FAST.to_dict()
    raw = {
        "description": "two types",
        "provenance": {"memory": {"coefficient": 1.0}, "kinds": {}},  # a note, not a type
        "fast": fast,
        "slow": SLOW.to_dict(),
        "calibrated": False,
    }
    c = Coefficients.from_dict(raw, "t.json")
    assert list(c.types) == ["fast", "slow"] and c["slow"] == SLOW and c["fast"] == FAST
    assert c.notes == {"description": "two types", "provenance": raw["provenance"]}
    assert Coefficients.from_dict(json.loads(json.dumps(c.to_dict())), "t.json") == replace(
        c, source="t.json"
    )
    # a type's section missing a figure is still read as a type: one line naming the figure
    del fast["layer_overhead_s"]
    with pytest.raises(DseError, match="coefficients t.json: fast: 'layer_overhead_s' is missing"):
        Coefficients.from_dict(raw, "t.json")


def test_the_shipped_coefficients_files_keep_their_sections():
    def types(name: str) -> list[str]:
        return list(load_coefficients(CONF_DIR / "platform" / name).types)

    assert types("jetson_xavier_nx.json") == ["cpu", "gpu"]
    assert types("localhost.json") == ["cpu"]
    assert types("edge3.json") == ["core100", "core60", "core40"]


def edge3(name: str = "edge3_ethernet") -> tuple[Platform, Coefficients]:
    cfg = yaml.safe_load((CONF_DIR / "platform" / f"{name}.yaml").read_text())
    return load_platform(cfg), load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])


def test_edge3_types_are_localhost_cores_slowed_by_their_share():
    plat, coeff = edge3()
    assert [(d.name, d.type) for d in plat.devices] == [
        ("edge0_cpu", "core100"),
        ("edge1_cpu0", "core60"),
        ("edge1_cpu1", "core40"),
    ]
    cpu = load_coefficients(CONF_DIR / "platform" / "localhost.json")["cpu"]
    for dtype, share in (("core100", 1.0), ("core60", 0.6), ("core40", 0.4)):
        t = coeff[dtype]
        assert t.frequency_hz == pytest.approx(cpu.frequency_hz * share)
        assert t.layer_overhead_s == pytest.approx(cpu.layer_overhead_s / share)
        assert (
            replace(t, frequency_hz=cpu.frequency_hz, layer_overhead_s=cpu.layer_overhead_s) == cpu
        )
    assert edge3("edge3_wifi")[1] == coeff


def conv10():
    """One 1x1 Conv of 10 output channels."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    return build_graph(
        f.model([node], {"x": [1, 4, 8, 8]}, ["y"], [f.weight("w", [10, 4, 1, 1])]), "c"
    )


def speed_split(model: AnalyticalModel) -> list[int]:
    """The conv's 10 channels cut into one part per device, sized to the model's speeds."""
    speed = model.device_speed()
    out = np.zeros((1, 1, 3), dtype=np.int32)
    counts = np.ones((1, 1, 3), dtype=np.int32)
    rules.speed_sizes(
        counts,
        np.array([[10], [1]]),
        np.zeros((1, 1), np.int8),
        np.ascontiguousarray(speed[[0]]),
        out,
    )
    return out[0, 0].tolist()


def test_speed_shares_follow_the_device_types():
    g = conv10()
    plat, coeff = edge3()
    model = AnalyticalModel(g, plat, coeff)
    speed = model.device_speed()[0]
    assert (speed / speed[0]).tolist() == pytest.approx([1.0, 0.6, 0.4])
    # 10 x (1, 0.6, 0.4) / 2: 5, 3, 2 channels
    assert speed_split(model) == [5, 3, 2]
    # the same devices all of their kind's type (localhost.json's cpu): equal parts 4, 3, 3
    untyped = replace(plat, devices=tuple(replace(d, type="cpu") for d in plat.devices))
    localhost = load_coefficients(CONF_DIR / "platform" / "localhost.json")
    assert speed_split(AnalyticalModel(g, untyped, localhost)) == [4, 3, 3]
