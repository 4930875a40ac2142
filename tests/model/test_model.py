"""The analytical model against schedules, byte counts and peaks worked out by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.mapping import from_autodice, from_device_lists, to_autodice
from dse.net import load_net
from dse.net.build import build_graph
from dse.platform import Link, Platform, load_platform
from models_analytical.coefficients import OP_CLASSES, Coefficients, Memory, TypeCoefficients
from models_analytical.model import AnalyticalModel
from models_analytical.schedule import ScheduleResult
from tests.helpers.graphs import relu_chain
from tests.helpers.platforms import RATE, coefficients, platform


def run(graph, plat, devices, coeff=None):
    model = AnalyticalModel(graph, plat, coeff or coefficients())
    return model.evaluate(from_device_lists(graph, len(plat), [devices]))


def test_two_layer_chain_on_two_devices():
    # r0 (2e6 MACs = 2 s) on h0; its 8 MB output crosses a 1 MB/s link with 0.5 s latency
    # (8.5 s); r1 (2 s) on h1. Latency 2 + 8.5 + 2 = 12.5 s.
    g = relu_chain(2_000_000, 2)
    ev = run(g, platform(bw=1e6 * 8 / 8, latency=0.5), [[0], [1]])
    assert ev.latency_s[0] == pytest.approx(2 + 0.5 + 8.0 + 2)
    assert ev.busy_s[0, :2] == pytest.approx([2, 2])
    assert ev.idle_s[0, :2] == pytest.approx([10.5, 10.5])
    assert ev.comm_s[0, :2] == pytest.approx([8.5, 8.5])
    assert ev.bytes_sent[0].tolist() == [8e6, 0, 0, 0]
    # energy: busy at 10 W plus idle at 1 W; unused devices draw nothing
    assert ev.energy_j[0].tolist() == pytest.approx([2 * 10 + 10.5, 2 * 10 + 10.5, 0, 0])
    assert ev.used[0].tolist() == [True, True, False, False]


def test_pipelined_period_is_the_slowest_span_busy_time_or_link():
    """r0, r1, r2 (2 s each) with 8 MB between them over 8 MB/s and 0.5 s (1.5 s a crossing).
    h0 -> h1 -> h0: h0 computes r0 (0-2), r1 crosses (2-3.5), h1 computes it (3.5-5.5), it
    crosses back (5.5-7), h0 computes r2 (7-9). h0 cannot start the next inference before 9:
    its span (first work to last) is the period, the latency, where busy time (4 s) and
    links (3 s) say 4. h0 -> h1 -> h1 pipelines: spans 2 and 4 (3.5-7.5), period 4 (h0's span
    starts with its first step, r0: it holds the image, which no device receives)."""
    from dse.objectives import OBJECTIVES

    g = relu_chain(2_000_000, 3)
    plat = platform(bw=8e6, latency=0.5)
    back = run(g, plat, [[0], [1], [0]])
    assert back.latency_s[0] == pytest.approx(9.0)
    assert back.span_s[0, :2].tolist() == pytest.approx([9.0, 2.0])
    assert back.busy_s[0, :2].tolist() == pytest.approx([4.0, 2.0])
    assert back.comm_s[0, :2].tolist() == pytest.approx([3.0, 3.0])
    assert OBJECTIVES["period"].values(back)[0] == pytest.approx(9000.0)  # ms
    chain = run(g, plat, [[0], [1], [1]])
    assert chain.latency_s[0] == pytest.approx(7.5)
    assert chain.span_s[0].tolist() == pytest.approx([2.0, 4.0, 0.0, 0.0])  # unused: 0
    assert OBJECTIVES["period"].values(chain)[0] == pytest.approx(4000.0)
    # the entry device h0 sends the image (8 MB, 0-1.5) to h1, which computes r0 and r1
    # (1.5-5.5) and sends back (5.5-7); h0 computes r2 (7-9). h0's span starts with its send.
    entry = run(g, plat, [[1], [1], [0]])
    assert entry.latency_s[0] == pytest.approx(9.0)
    assert entry.span_s[0, :2].tolist() == pytest.approx([9.0, 4.0])
    assert OBJECTIVES["period"].values(entry)[0] == pytest.approx(9000.0)


def test_pipelined_period_is_at_most_the_latency():
    """conv1 and conv2 (1x1) split over h0 and h1 on a 1,000 B/s link with 0.5 s latency: the
    image (1,600 B) to h1, 2.1 s; conv1's parts (1,200 B) both ways at once, 1.7 s each; h1's
    part of conv2 to h0, 1.7 s. Latency 5.5018 s (two 1.5 ms parts, a 1.5 ms concatenation);
    h0's links 2.1 + 3 x 1.7 = 7.2 s, more than the latency, since it sends and receives at
    once: frames back to back are never slower than one after another, the period is the
    latency."""
    from dse.objectives import OBJECTIVES

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1"),
        helper.make_node("Conv", ["c", "w2"], ["y"], name="conv2"),
    ]
    weights = [f.weight("w1", [6, 4, 1, 1]), f.weight("w2", [6, 6, 1, 1])]
    g = build_graph(f.model(nodes, {"x": [1, 4, 10, 10]}, ["y"], weights), "cc")
    ev = run(g, platform(bw=1e3, latency=0.5), [[0, 1], [0, 1]])
    assert ev.bytes_sent[0, :2].tolist() == [2800, 2400]
    assert ev.comm_s[0, :2].tolist() == pytest.approx([7.2, 7.2])
    assert ev.latency_s[0] == pytest.approx(5.5018)
    assert OBJECTIVES["period"].values(ev)[0] == pytest.approx(5501.8)


def conv_then_relu():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return build_graph(
        f.model(nodes, {"x": [1, 4, 10, 10]}, ["y"], [f.weight("w", [6, 4, 1, 1])]), "cr"
    )


def test_lop_split_over_three_devices_moves_eq_4_3_bytes():
    # conv split over h0..h2, its successor on h3, the input entering on h3: every part needs
    # the whole input (IS * N) and the parts come back to h3 (OS): Eq. 4.3
    g = conv_then_relu()
    plat = platform(n=4)
    plat = Platform(plat.name, plat.devices, plat.links, entry=3)
    ev = run(g, plat, [[0, 1, 2], [3]])
    in_bytes, out_bytes = 4 * 100 * 4, 6 * 100 * 4
    assert ev.bytes_sent[0].sum() == pytest.approx(3 * in_bytes + out_bytes)
    assert ev.bytes_sent[0].tolist() == pytest.approx(
        [out_bytes / 3, out_bytes / 3, out_bytes / 3, 3 * in_bytes]
    )
    # the three inputs queue on separate links (one per pair); each part computes a third of
    # the conv, then (the Relu follows the split conv) a third of the Relu on its part, and the
    # Relu's parts (as many bytes as the conv's) come back to h3, the Relu's device
    part_s = g.layers[0].macs / 3 / RATE
    t_in = in_bytes / 1e6
    back = (out_bytes / 3) / 1e6
    relu_s = g.layers[1].macs / RATE
    assert ev.latency_s[0] == pytest.approx(t_in + part_s + relu_s / 3 + back)
    assert ev.busy_s[0].tolist() == pytest.approx([part_s + relu_s / 3] * 3 + [0])
    assert ev.used[0].all()  # h3 computes nothing but holds the input and the output


def test_owner_of_a_split_layer_follows_the_thesis_rule():
    g = conv_then_relu()
    batch = from_device_lists(g, 4, [[[1, 2], [3]], [[0, 1], [1]]])
    assert batch.dense(g)[1].tolist() == [[3, 3], [1, 1]]  # concat on the next layer's device
    two = build_graph(  # the last layer split: concatenated on the previous layer's device
        f.model(
            [
                helper.make_node("Conv", ["x", "w"], ["c"], name="conv1"),
                helper.make_node("Conv", ["c", "v"], ["y"], name="conv2"),
            ],
            {"x": [1, 4, 10, 10]},
            ["y"],
            [f.weight("w", [6, 4, 1, 1]), f.weight("v", [6, 6, 1, 1])],
        ),
        "cc",
    )
    last = from_device_lists(two, 4, [[[1], [2, 3]]])
    assert last.dense(two)[1].tolist() == [[1, 1]]


def test_equal_split_spreads_the_remainder():
    g = conv_then_relu()  # 6 channels
    batch = from_device_lists(g, 4, [[[0, 1, 2, 3], [0]]])
    assert batch.sizes[0, 0].tolist() == [2, 2, 1, 1]
    assert (batch.dense(g)[0][0, 0] * 6).tolist() == pytest.approx([2, 2, 1, 1])


def fork_join():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Relu", ["a"], ["b"], name="b"),
        helper.make_node("Relu", ["a"], ["c"], name="c"),
        helper.make_node("Add", ["b", "c"], ["y"], name="join"),
    ]
    return build_graph(f.model(nodes, {"x": [1_000_000]}, ["y"]), "fj")


def test_fork_join_branches_on_two_devices_overlap():
    # each layer 1 s; a on h0 sends 4 MB (4 s at 1 MB/s) to h1 and h2, on separate links;
    # b and c run in parallel, then both send 4 MB back to h0: the branches overlap
    g = fork_join()
    ev = run(g, platform(), [[0], [1], [2], [0]])
    assert ev.latency_s[0] == pytest.approx(1 + 4 + 1 + 4 + 1)
    serial = run(g, platform(), [[0], [0], [0], [0]])
    assert serial.latency_s[0] == pytest.approx(4)


def test_transfers_on_one_link_queue():
    # a and b run on h0 in (almost) no time; their outputs of 3 MB and 5 MB both go to h1 over
    # the same link and queue: they arrive at 3 s and 8 s, not both by 5 s.
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Relu", ["x2"], ["b"], name="b"),
        helper.make_node("Relu", ["a"], ["ya"], name="ca"),
        helper.make_node("Relu", ["b"], ["yb"], name="cb"),
    ]
    g = build_graph(f.model(nodes, {"x": [750_000], "x2": [1_250_000]}, ["ya", "yb"]), "q")
    plat = platform(n=2, bw=1e6)
    fast = {c: 1e9 for c in OP_CLASSES}
    power = coefficients()["cpu"].power_w
    coeff = Coefficients({"cpu": TypeCoefficients(1e6, fast, 0.0, Memory(1.0, 0.0, 0.0), power)})
    ev = run(g, plat, [[0], [0], [1], [1]], coeff)
    assert ev.latency_s[0] == pytest.approx((3e6 + 5e6) / 1e6, rel=1e-6)


def two_orders():
    """The two-branch graph run as stored (21 MB peak) and one branch at a time (12 MB)."""
    return [
        build_graph(f.two_branches(order), "o")
        for order in (("A", "B", "C", "B2", "C2", "E"), ("A", "B", "B2", "C", "C2", "E"))
    ]


def test_liveness_peak_depends_on_the_order():
    plat = platform(n=1, weights="resident")
    peaks = []
    for g in two_orders():
        ev = run(g, plat, [[0]] * len(g))
        peaks.append(ev.memory_mb[0, 0])
    # allocate-then-free: A + B + C = 21 MB in the first order; at most 12 MB in the second;
    # plus the 1 MB input image, which the runtime keeps where it enters (held apart from the
    # peak), and 48 bytes of int64 constants (the Tile repeats and Slice bounds)
    assert peaks == pytest.approx([22.0, 13.0], abs=1e-4)


def test_infeasible_mapping_violates_capacity():
    g = relu_chain(1_000_000, 3)  # 4 MB per tensor
    ev = run(g, platform(capacity=7.0), [[0], [0], [0]])
    # input and output of a layer, and the input image (kept where it enters)
    assert ev.memory_mb[0, 0] == pytest.approx(12.0)
    assert not ev.feasible[0]
    assert ev.constraints()[0, 0] == pytest.approx(12.0 / 7.0 - 1)
    ok = run(g, platform(capacity=12.0), [[0], [0], [0]])
    assert ok.feasible[0]


def test_autodice_round_trip(tmp_path):
    g = load_net({"name": "alexnet"}).graph
    keys = [f"xavier{i}_cpu" for i in range(4)]
    rng = np.random.default_rng(0)
    lists = []
    for layer in g:
        if layer.splittable:
            lists.append(sorted(rng.choice(4, size=rng.integers(1, 5), replace=False).tolist()))
        else:
            lists.append([int(rng.integers(4))])
    batch = from_device_lists(g, 4, [lists])
    mapping, horizontal = to_autodice(g, keys, batch)
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    back = from_autodice(
        g,
        keys,
        json.loads((tmp_path / "mapping.json").read_text()),
        json.loads(json.dumps(horizontal)),
    )
    assert np.array_equal(back.device, batch.device)
    assert np.array_equal(back.sizes, batch.sizes)
    # uneven split points are kept
    name = next(n for n, spec in horizontal.items() if len(spec[2]) == 2)
    horizontal[name][1] = [1]
    uneven = from_autodice(g, keys, mapping, horizontal)
    layer = g.index[name]
    s = int(np.searchsorted(g.split_layers, layer))
    assert uneven.sizes[0, s].max() == g.out_channels[layer] - 1


@pytest.mark.parametrize(
    ("mapping", "horizontal", "message"),
    [
        ({"xavier0_cpu": ["conv1", "nope"]}, None, "unknown node 'nope'"),
        ({"mars_cpu": ["conv1"]}, None, "unknown device 'mars_cpu'"),
        ({"xavier0_cpu": ["conv1"]}, None, "mapped to no device"),
    ],
)
def test_autodice_errors(mapping, horizontal, message):
    from dse.errors import DseError

    g = load_net({"name": "alexnet"}).graph
    with pytest.raises(DseError, match=message):
        from_autodice(g, ["xavier0_cpu", "xavier1_cpu"], mapping, horizontal)


def test_split_of_a_non_splittable_layer_is_refused():
    from dse.errors import DseError

    g = load_net({"name": "alexnet"}).graph
    mapping = {"xavier0_cpu": list(g.names), "xavier1_cpu": ["relu1"]}
    with pytest.raises(DseError, match="'relu1' .* cannot be split"):
        from_autodice(g, ["xavier0_cpu", "xavier1_cpu"], mapping)


TABLE2 = {
    "alexnet": (28.3e-3, 152.746, 0.352),
    "vgg16": (122.46e-3, 446.852, 1.959),
    "densenet121": (138.68e-3, 95.969, 1.026),
}


@pytest.mark.parametrize("net", sorted(TABLE2))
def test_default_platform_reproduces_thesis_table2(net):
    import yaml

    from dse.paths import CONF_DIR
    from models_analytical.coefficients import load_coefficients

    cfg = yaml.safe_load((CONF_DIR / "platform" / "jetson_xavier_nx_x8.yaml").read_text())
    plat = load_platform(cfg)
    coeff = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    g = load_net({"name": net}).graph
    ev = run(g, plat, [[plat.entry]] * len(g), coeff)
    latency, memory, energy = TABLE2[net]
    # latency and energy are what the shipped coefficients were fitted to (errors 1e-14);
    # memory is the thesis's own estimate, which counts buffers a little differently (<= 4.5 %)
    assert ev.latency_s[0] == pytest.approx(latency, rel=1e-3)
    assert ev.memory_mb[0].max() == pytest.approx(memory, rel=0.05)
    assert ev.energy_j[0].max() == pytest.approx(energy, rel=1e-3)


def test_memory_aware_order_finds_the_low_peak():
    from dse.net.order import memory_aware_order, peak_memory

    bad, _ = two_orders()
    assert peak_memory(bad, range(len(bad))) == pytest.approx(21e6, abs=100)
    order = memory_aware_order(bad)
    assert peak_memory(bad, order) == pytest.approx(12e6, abs=100)
    # the kernel agrees with the independent Python count on the reordered graph
    plat = platform(n=1, weights="resident")
    ev = run(bad.reordered(order), plat, [[0]] * len(bad))
    # and the 1 MB input image the runtime keeps where it enters, which no order frees
    assert ev.memory_mb[0, 0] == pytest.approx(12.0 + 1.0, abs=1e-4)


def test_shared_medium_queues_every_network_transfer():
    # the fork-join of above, on Wi-Fi: a's two sends and the two sends back share one medium.
    # a 0-1; to h1 1-5; to h2 5-9; b 5-6; c 9-10; b back 9-13; c back 13-17; join 17-18
    g = fork_join()
    plat = platform()
    wifi = Platform(plat.name, plat.devices, plat.links, entry=0, network="shared")
    assert run(g, wifi, [[0], [1], [2], [0]]).latency_s[0] == pytest.approx(18)


def test_pair_override_changes_one_link():
    g = relu_chain(2_000_000, 2)
    plat = platform()
    fast = Platform(
        plat.name,
        plat.devices,
        plat.links,
        entry=0,
        pair_links={(0, 1): Link(0.0, 8e6), (1, 0): Link(0.0, 8e6)},
    )
    assert run(g, fast, [[0], [1]]).latency_s[0] == pytest.approx(2 + 1 + 2)
    assert run(g, fast, [[0], [2]]).latency_s[0] == pytest.approx(2 + 8 + 2)


def two_convs():
    """x [1,4,10,10] -> conv1 (6 channels, 1x1) -> conv2 (6 channels, 1x1) -> y: 1600 bytes in,
    2400 bytes out of each conv, 96 + 144 bytes of weights."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Conv", ["c1", "w2"], ["y"], name="conv2"),
    ]
    inits = [f.weight("w1", [6, 4, 1, 1]), f.weight("w2", [6, 6, 1, 1])]
    return build_graph(f.model(nodes, {"x": [1, 4, 10, 10]}, ["y"], inits), "cc")


def test_consecutive_split_layers_all_gather_their_parts():
    # both convs split 3 | 3 channels over h0, h1 (owner h0), at 1 MB/s; compute is made
    # negligible (1e15 MAC/s) so the schedule is the transfers:
    #   x to h1: 1600 B, 0 -> 1.6 ms; conv1's parts run at 0 (h0) and 1.6 ms (h1);
    #   all-gather: part0 h0 -> h1 and part1 h1 -> h0 (1200 B each, one link each way) both
    #   1.6 -> 2.8 ms; each device concatenates and runs its part of conv2 at 2.8 ms;
    #   y is a graph output: only its owner h0 gathers, part1 h1 -> h0 2.8 -> 4.0 ms.
    # (The owner-concatenates rule: part1 to h0 2.8 ms, the whole back to h1 5.2, y 6.4 ms.)
    g = two_convs()
    ev = run(g, platform(n=2, bw=1e6), [[0, 1], [0, 1]], coefficients(rate=1e15))
    assert ev.latency_s[0] == pytest.approx(4.0e-3, abs=1e-9)
    assert ev.bytes_sent[0].tolist() == pytest.approx([1600 + 1200, 1200 + 1200])
    # memory (coefficient 1, no bias) as the runtime holds it. Kept for good: x (1600, where
    # it enters and where it is received) and the gathered wholes, c1 (2400) on both and y
    # (2400) on its owner h0. Peak of the rest: the weights (half of 96 + 144 B, resident) and
    # each part a device sends, held to the end of the inference when its sends complete
    # (c1's on both, 1200; y's on h1, 1200).
    # h0: 1600 + 2400 + 2400 + 120 + 1200 = 7720; h1: 1600 + 2400 + 120 + 1200 + 1200 = 6520
    assert ev.memory_mb[0].tolist() == pytest.approx([7720e-6, 6520e-6])
    # conv2 on all three devices: h0 (the owner) and h1 gather conv1's parts from each other,
    # h2 computed no part and gets the whole from the owner; y's parts (800 B) go to h0
    ev = run(g, platform(n=3, bw=1e6), [[0, 1], [0, 1, 2]], coefficients(rate=1e15))
    assert ev.bytes_sent[0].tolist() == pytest.approx([1600 + 1200 + 2400, 1200 + 800, 800])


def test_schedule_result_names_each_figure():
    # the schedule of test_consecutive_split_layers_all_gather_their_parts, read field by field
    g = two_convs()
    model = AnalyticalModel(g, platform(n=2, bw=1e6), coefficients(rate=1e15))
    result = model._simulate(from_device_lists(g, 2, [[[0, 1], [0, 1]]]), with_weights=True)
    assert isinstance(result, ScheduleResult)
    assert result.latency_s[0] == pytest.approx(4.0e-3, abs=1e-9)
    # h0 sends x (1600 B) and its part of c1 (1200 B), receives h1's parts of c1 and y; h1
    # receives x, sends its parts of c1 and y, receives h0's part of c1: 5.2 ms of links each
    assert result.comm_s[0].tolist() == pytest.approx([5.2e-3, 5.2e-3])
    assert result.bytes_sent[0].tolist() == pytest.approx([2800, 2400])
    # kept for good: x where it enters and where it is received, the gathered c1 on both and
    # y on its owner h0; the peak: half the weights (120 B) and the parts sent
    assert result.held_bytes[0].tolist() == pytest.approx([1600 + 2400 + 2400, 1600 + 2400])
    assert result.peak_bytes[0].tolist() == pytest.approx([120 + 1200, 120 + 1200 + 1200])
    # a part of each conv on each device; each device's work cut once, by the gather of c1
    assert result.parts[0].tolist() == [2, 2]
    assert result.segments[0].tolist() == [2, 2]
    # half of each conv's weights (48 + 72 B), all in the conv class
    assert result.weights_mb[0].ravel().tolist() == pytest.approx([120e-6, 0.0, 120e-6, 0.0])
    assert result.busy_s[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-9)
    assert result.energy_j[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_an_edited_stage_recompiles_its_cached_callers(tmp_path):
    """numba stamps a cached function with its own file; the kernel's cache is stamped with all
    its sources, so a caller cached with a stage of another module runs the edited stage."""
    (tmp_path / "callee.py").write_text(
        "from models_analytical.schedule.compiled import compiled\n\n"
        "@compiled\ndef f(x):\n    return x + 1\n"
    )
    (tmp_path / "caller.py").write_text(
        "from callee import f\nfrom models_analytical.schedule.compiled import compiled\n\n"
        "@compiled\ndef g(x):\n    return f(x) * 2\n"
    )
    script = (
        "import sys, pathlib\n"
        "import models_analytical.schedule.compiled as c\n"
        f"c.PACKAGE = pathlib.Path({str(tmp_path)!r})\n"
        "c.sources_digest.cache_clear()\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import caller\n"
        "print(caller.g(1), caller.g._cache._impl.locator.__class__.__name__)\n"
    )

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert run() == ["4", "KernelCacheLocator"]  # compiled and cached
    assert run() == ["4", "KernelCacheLocator"]  # loaded from the cache
    callee = tmp_path / "callee.py"
    callee.write_text(callee.read_text().replace("x + 1", "x + 100"))
    assert run()[0] == "202"  # numba alone would load g's stale code: 4


ONE_COMPILER = """
import os, sys, time
sys.path.insert(0, os.getcwd())
import kern
from models_analytical.schedule.compiled import in_cache, one_compiler
open(f"ready{os.getpid()}", "w").close()
while sum(n.startswith("ready") for n in os.listdir()) < 2:  # both imported, neither compiled
    time.sleep(0.01)
cold = in_cache(kern.f) is False
with one_compiler(kern.f):
    time.sleep(2.0)  # the holder compiles late: the other reaches the lock meanwhile
    kern.f(1)
print(int(cold), sum(kern.f.stats.cache_misses.values()), sum(kern.f.stats.cache_hits.values()))
"""


def test_processes_at_a_cold_kernel_compile_it_once(tmp_path):
    """Two processes reach a cached function with numba's cache cold: under one_compiler one
    compiles it (a cache miss) while the other waits, then reads the cache (a hit). Without the
    lock both would compile: each waits 2 s before compiling, after finding the cache cold."""
    (tmp_path / "kern.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ONE_COMPILER],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    got = sorted(tuple(map(int, out.split())) for out, _ in outs)
    assert got == [(1, 0, 1), (1, 1, 0)]  # (found it cold, compiled, read the cache)
    assert (tmp_path / "__pycache__" / "f.lock").exists()


# --- the kernel's threads, chosen by timing them ------------------------------------------------


def test_thread_tuner_tries_each_then_keeps_the_faster_and_reprobes():
    from models_analytical.threads import ThreadTuner

    tuner = ThreadTuner([1, 2], reprobe=5)

    def run(seconds, n):
        picked = []
        for _ in range(n):
            t = tuner.choose()
            picked.append(t)
            tuner.record(t, 1000, seconds[t])
        return picked

    # an idle machine, two threads twice as fast: a first untimed batch (on the most
    # threads), each choice once, then the faster; the other one again at every 4th batch
    # until it has 3 timings (batches 4 and 5: 5 is a reprobe), then every 5th
    assert run({1: 1.0, 2: 0.5}, 12) == [2, 1, 2, 2, 1, 1, 2, 2, 2, 2, 1, 2]
    assert tuner.rate(2) == 2000 and tuner.rate(1) == 1000
    # one slow batch on two threads does not flip the choice (median of the last three)
    assert run({1: 1.0, 2: 5.0}, 1) == [2]
    assert run({1: 1.0, 2: 0.5}, 2) == [2, 2]
    # the machine gets busy, two threads now slower: batch 15 reprobes one thread, two lose
    # once two of their last three batches were slow, and are timed again at batch 20
    assert run({1: 1.0, 2: 1.6}, 6) == [1, 2, 2, 1, 1, 2]
    assert ThreadTuner([3]).choose() == 3  # a fixed choice stays
    fixed = ThreadTuner([3])
    fixed.record(3, 1000, 1.0)
    assert fixed.choose() == 3


def test_model_threads_fixed_or_tuned_and_small_batches_on_one():
    import numba

    from models_analytical.model import PARALLEL_MIN_BATCH

    g, plat = relu_chain(1000, 3), platform()
    fixed = AnalyticalModel(g, plat, coefficients(), threads=1)
    assert fixed.tuner.choices == [1]
    tuned = AnalyticalModel(g, plat, coefficients())
    assert tuned.tuner.choices == sorted({1, numba.config.NUMBA_NUM_THREADS})

    def batch(n):
        return from_device_lists(g, len(plat), [[[0], [1], [0]]] * n)

    small = tuned.evaluate(batch(PARALLEL_MIN_BATCH - 1))
    assert tuned.tuner.batches == 0  # small batches are not timed: always one thread
    large = tuned.evaluate(batch(PARALLEL_MIN_BATCH))
    assert tuned.tuner.batches == 1
    assert large.latency_s[0] == small.latency_s[0]  # threads change the speed, not the numbers


def test_a_batch_on_threads_gives_each_mappings_numbers_alone():
    """Chunks of a batch run on the calling thread and pool threads: every figure of every
    mapping is what the mapping scheduled alone gives, bit for bit (VGG-16, 300 random
    advanced mappings); the threads' scratch, kept for the next batch, gives that batch the
    figures of fresh scratch."""
    import yaml

    from chromosomes import AdvancedChromosome
    from dse.paths import CONF_DIR
    from models_analytical.coefficients import load_coefficients
    from models_analytical.schedule import simulate

    cfg = yaml.safe_load((CONF_DIR / "platform" / "jetson_xavier_nx_x8.yaml").read_text())
    plat = load_platform(cfg)
    coeff = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    g = load_net({"name": "vgg16"}).graph
    chrom = AdvancedChromosome(g, len(plat))
    rng = np.random.default_rng(3)
    batch = chrom.decode(chrom.sample(300, rng))
    model = AnalyticalModel(g, plat, coeff, threads=1)
    one = model._simulate(batch, with_weights=True)
    args = (g.first_consumer, g.first_producer, model._w_class, True, model.inputs)
    # three threads, 12 chunks of 25 mappings
    kept: list = []
    both = simulate(batch.device, batch.sizes, batch.axis, model._units, *args, 3, kept)
    assert len(kept) == 3
    other = chrom.decode(chrom.sample(200, rng))
    again = simulate(other.device, other.sizes, other.axis, model._units, *args, 3, kept)
    fresh = simulate(other.device, other.sizes, other.axis, model._units, *args, 1)
    for name in ScheduleResult._fields:
        assert np.array_equal(getattr(again, name), getattr(fresh, name)), name
    for k in (0, 150, 299):
        single = AnalyticalModel(g, plat, coeff)._simulate(batch.take(k), with_weights=True)
        for name in ScheduleResult._fields:
            assert getattr(single, name)[0].tolist() == getattr(one, name)[k].tolist(), name
    for name in ScheduleResult._fields:
        assert np.array_equal(getattr(one, name), getattr(both, name)), name
