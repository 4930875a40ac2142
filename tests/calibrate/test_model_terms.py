"""The model with calibrated terms, by hand: profiled and regressed layer times, channel
blocks, parts' and bands' fixed shares and split factor, shared hosts, link tables and cut
costs, receiving on the device, memory by weight class."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

from dse.calibrate.bands import band_rows
from dse.mapping import from_device_lists
from dse.mapping import whole as whole_on
from dse.net.build import build_graph
from dse.platform import Device, Link, Platform
from models_analytical.coefficients import Coefficients, Memory
from models_analytical.layer_costs import family, layer_key
from models_analytical.layer_fits import fit_row_fixed
from models_analytical.model import AnalyticalModel
from tests.helpers.calibrate import board_pair_model, chain_model, conv1_split, one_mapping
from tests.helpers.onnx_factory import conv_relu_chain, model, weight
from tests.helpers.platforms import RATE, coefficients
from tests.helpers.platforms import platform as small_platform


def test_model_uses_profiled_and_regressed_layer_times() -> None:
    graph, _ = chain_model(coefficients())
    base = coefficients()["cpu"]
    keys = [layer_key(layer) for layer in graph]
    # conv0 profiled at 5 ms; the relus, fused into the convs before them, regressed at 1 ms +
    # 1e-9 s per byte moved
    reg = {"fused": [1e-3, 0.0, 1e-9, 0.0]}
    cpu = dataclasses.replace(base, layer_s={keys[0]: 5e-3}, regression=reg)
    _, m = chain_model(Coefficients({"cpu": cpu}))
    t = m.tables.t_work[0]
    assert t[0] == pytest.approx(5e-3)
    relu = graph.layers[1]
    act = sum(x.nbytes for x in relu.inputs) + relu.output_bytes
    assert t[1] == pytest.approx(1e-3 + 1e-9 * act)
    # conv1 is neither profiled nor of a regressed family: Eq. 4.7 (MACs / rate)
    assert t[2] == pytest.approx(graph.macs[2] / 1e6)
    assert list(m.tables.source[0]) == [1, 2, 0, 2, 0, 2]


def test_a_layer_profiled_on_another_type_is_scaled_to_this_one() -> None:
    """Two types profiled twelve layer keys of other networks alike, "slow" at 1.4-2.5 times
    "cpu" (their totals, 78 and 149.4 ms, by hand). conv0, profiled on "cpu" only, takes
    its 4 ms times 149.4 / 78 on "slow", not its regression; conv1, profiled on neither,
    the regression; with fewer than SCALE_MIN_COMMON keys in common, conv0 is regressed
    too."""
    graph, _ = chain_model(coefficients())
    keys = [layer_key(layer) for layer in graph]
    ratios = [1.4] * 3 + [1.5] * 6 + [2.5] * 3
    shared_fast = {f"other{i}": 1e-3 * (i + 1) for i in range(12)}
    shared_slow = {k: v * r for (k, v), r in zip(shared_fast.items(), ratios, strict=True)}
    reg = {family(graph.layers[i]): [0.0, 1e-9, 0.0, 0.0] for i in (0, 2)}
    base = coefficients()["cpu"]
    fast = dataclasses.replace(base, layer_s={**shared_fast, keys[0]: 4e-3}, regression=reg)
    slow = dataclasses.replace(base, layer_s=shared_slow, regression=reg)
    _, m = chain_model(Coefficients({"cpu": fast, "slow": slow}))
    # 1+2+3 ms at 1.4, 4+...+9 ms at 1.5, 10+11+12 ms at 2.5
    assert sum(shared_fast.values()) == pytest.approx(78e-3)
    assert sum(shared_slow.values()) == pytest.approx(6e-3 * 1.4 + 39e-3 * 1.5 + 33e-3 * 2.5)
    assert m.tables.t_work[1, 0] == pytest.approx(4e-3 * 149.4 / 78)
    assert m.tables.source[1, 0] == 3
    assert m.tables.t_work[1, 2] == pytest.approx(1e-9 * graph.macs[2])
    assert m.tables.source[1, 2] == 2
    few = dataclasses.replace(slow, layer_s=dict(list(shared_slow.items())[:9]))
    _, m = chain_model(Coefficients({"cpu": fast, "slow": few}))
    assert m.tables.source[1, 0] == 2
    assert m.tables.t_work[1, 0] == pytest.approx(1e-9 * graph.macs[0])


def test_split_conv_parts_cost_whole_channel_blocks() -> None:
    """A 256-channel conv split 8 / 248 channels with blocks of 16: the small part costs
    16 / 256 of the layer, the large one 256 / 256 (capped), by hand; the Relu after it runs
    on the parts by their shares (no channel blocks)."""
    base = coefficients()["cpu"]
    cpu = dataclasses.replace(base, channel_block=16)
    graph, m = chain_model(Coefficients({"cpu": cpu}))
    ev = conv1_split(graph, m, [8 / 256, 248 / 256])
    t = m.tables.t_work[0]
    assert graph.follows[3] == 2
    assert ev.busy_s[0, 1] == pytest.approx(t[2] * 1.0 + t[3] * 248 / 256)
    rest = t.sum() - t[2] - t[3]
    assert ev.busy_s[0, 0] == pytest.approx(rest + t[2] * 16 / 256 + t[3] * 8 / 256)


@pytest.mark.parametrize("how", ["timed", "family"])
def test_split_parts_pay_their_layer_fixed_share(how: str) -> None:
    """conv1 (256 channels) split 8 / 248 channels with a fixed share of 0.25 (timed for this
    layer, or its family's 64 share x channels / 256 channels), blocks of 16 and a split
    factor of 1.5: the small part costs (0.25 + 0.75 x 16 / 256) x 1.5 of the layer, the large
    one (0.25 + 0.75 x 1) x 1.5, by hand; the Relu after it costs its share x 1.5."""
    graph, _ = chain_model(coefficients())
    conv = graph.layers[2]
    if how == "timed":
        extra = {"part_fixed": {layer_key(conv): 0.25}}
    else:
        extra = {"part_fixed_channels": {family(conv): 64.0}}
    cpu = dataclasses.replace(
        coefficients()["cpu"], channel_block=16, split_work_factor=1.5, **extra
    )
    _, m = chain_model(Coefficients({"cpu": cpu}))
    ev = conv1_split(graph, m, [8 / 256, 248 / 256])
    t = m.tables.t_work[0]
    assert graph.follows[3] == 2
    small = (0.25 + 0.75 * 16 / 256) * 1.5
    assert ev.busy_s[0, 1] == pytest.approx(t[2] * 1.5 + t[3] * 248 / 256 * 1.5)
    rest = t.sum() - t[2] - t[3]
    assert ev.busy_s[0, 0] == pytest.approx(rest + t[2] * small + t[3] * 8 / 256 * 1.5)
    # conv0 is of conv1's family: it has the family's share too (not timed), but unsplit it
    # costs the whole layer (rest, above)
    assert m.tables.part_fixed[0, 0] == (0.0 if how == "timed" else pytest.approx(0.25))


def test_split_parts_run_slower_by_the_split_work_factor() -> None:
    """Parts of a split layer (and of the Relu that follows it) cost share x time x factor;
    an unsplit layer is unaffected."""
    cpu = dataclasses.replace(coefficients()["cpu"], split_work_factor=1.5)
    graph, m = chain_model(Coefficients({"cpu": cpu}))
    ev = conv1_split(graph, m, [0.25, 0.75])
    t = m.tables.t_work[0]
    split = t[2] + t[3]  # conv1 and its Relu
    assert ev.busy_s[0, 1] == pytest.approx(split * 0.75 * 1.5)
    assert ev.busy_s[0, 0] == pytest.approx(t.sum() - split + split * 0.25 * 1.5)


@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_a_band_costs_what_its_rows_were_timed_as_the_fit_reads_them(factor: float) -> None:
    """A 3x3 conv over 16 rows timed as bands with t(rows) = a + b rows, a 20 % of its whole
    time (dse.calibrate.bands' rows): fit_row_fixed's share for its family, in the model, makes
    each band of a split by rows 5 / 11 cost the time its rows were timed at, times the split
    factor."""
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    graph = build_graph(
        model([conv], {"x": [1, 2, 16, 8]}, ["y"], [weight("w", [4, 2, 3, 3])]), "c"
    )
    layer = graph.layers[0]
    t_full = layer.macs / RATE  # the helpers' rate: the model's whole time of the layer

    def timed(rows: int) -> float:
        return t_full * (0.2 + 0.8 * rows / 16)

    fit = fit_row_fixed(
        [{"key": "c", "family": family(layer), "rows": r, "full": 16, "seconds": timed(r)}
         for r in band_rows(16)],
        min_layers=1,
    )  # fmt: skip
    cpu = dataclasses.replace(fit.apply(coefficients()["cpu"]), split_work_factor=factor)
    m = AnalyticalModel(graph, small_platform(2, bw=1e12), Coefficients({"cpu": cpu}))
    split = from_device_lists(graph, 2, [[[0, 1]]], rows=[0])
    split.sizes[0, 0] = [5, 11]
    ev = m.evaluate(split)
    assert ev.busy_s[0].tolist() == pytest.approx([timed(5) * factor, timed(11) * factor])


@pytest.mark.parametrize("hosts", ["one", "two"])
def test_parts_run_slower_side_by_side_with_a_part_on_their_host(hosts: str) -> None:
    """shared_host_factor 1.5, two devices: every layer split over both runs every part (its
    work, its sub-model's costs, the gathers after it) 1.5x as long on one host, as before on
    two; a vertical cut, where the devices never run parts of one layer, as before on both."""
    devices = tuple(
        Device(
            f"h{i if hosts == 'two' else 0}_cpu{i}", f"h{i if hosts == 'two' else 0}", "cpu", 1, 1e4
        )
        for i in range(2)
    )
    plat = Platform(
        "t", devices, {"network": Link(0.0, 1e12), "same_host": Link(0.0, 1e12)}, entry=0
    )
    graph = build_graph(conv_relu_chain(), "chain")
    n = len(graph)
    # each conv over both devices; each Relu follows on its conv's parts
    split = from_device_lists(graph, 2, [[[0, 1] if i % 2 == 0 else [0] for i in range(n)]])
    vertical = whole_on(graph, 2, [0, 0] + [1] * (n - 2))
    ev = {}
    for factor in (1.0, 1.5):
        cpu = dataclasses.replace(coefficients()["cpu"], shared_host_factor=factor)
        m = AnalyticalModel(graph, plat, Coefficients({"cpu": cpu}))
        ev[factor] = (m.evaluate(split), m.evaluate(vertical))
    slow = 1.5 if hosts == "one" else 1.0
    assert ev[1.0][0].busy_s[0].min() > 0
    np.testing.assert_allclose(ev[1.5][0].busy_s, slow * ev[1.0][0].busy_s, rtol=1e-9)
    np.testing.assert_allclose(ev[1.5][1].busy_s, ev[1.0][1].busy_s, rtol=1e-12)
    np.testing.assert_allclose(ev[1.5][1].latency_s, ev[1.0][1].latency_s, rtol=1e-12)


def test_a_device_that_only_holds_an_absorbed_layers_share_slows_no_one() -> None:
    """Two devices on host A, one on host B, shared_host_factor 1.5: conv1 split over a0 and
    b2; the Relu after it runs on those parts, whatever its own shares say (here a1). a1
    computes nothing, so nothing on a0 is slower: busy times equal those at factor 1."""
    devices = (
        Device("a_cpu0", "a", "cpu", 1, 1e4),
        Device("a_cpu1", "a", "cpu", 1, 1e4),
        Device("b_cpu0", "b", "cpu", 1, 1e4),
    )
    plat = Platform("t", devices, {"network": Link(0.0, 1e9), "same_host": Link(0.0, 1e9)}, entry=0)
    graph = build_graph(conv_relu_chain(), "chain")
    half = int(graph.out_channels[2]) // 2
    devices = np.zeros(len(graph), int)
    devices[3] = 1  # the Relu's own device: ignored, it runs on conv1's parts
    batch = one_mapping(graph, 3, devices, {2: [half, 0, half]})
    busy = {}
    for factor in (1.0, 1.5):
        cpu = dataclasses.replace(coefficients()["cpu"], shared_host_factor=factor)
        busy[factor] = AnalyticalModel(graph, plat, Coefficients({"cpu": cpu})).evaluate(batch)
    assert busy[1.5].busy_s[0, 1] == 0.0
    np.testing.assert_allclose(busy[1.5].busy_s, busy[1.0].busy_s)


def test_measured_link_table_and_cut_costs() -> None:
    """A transfer takes the link table's time (linear between its points) plus the cut cost."""
    table = {"bytes": [1e3, 1e6], "seconds": [1e-5, 1e-3]}
    cpu = dataclasses.replace(coefficients()["cpu"], transfer_fixed_s=2e-4)
    coeff = Coefficients({"cpu": cpu}, links={"network": table})
    graph, m = chain_model(coeff)
    n = len(graph)
    ev = m.evaluate(whole_on(graph, 2, [0, 0] + [1] * (n - 2)))  # conv0, relu0 on device 0
    nbytes = graph.layers[1].output_bytes
    link = 1e-5 + (nbytes - 1e3) * (1e-3 - 1e-5) / (1e6 - 1e3)
    assert ev.latency_s[0] == pytest.approx(m.tables.t_work[0].sum() + link + 2e-4)


def test_receive_occupies_the_receiving_device_by_hand() -> None:
    """A split layer's part made on device 1 is gathered on device 0, still busy with its
    larger part: when receiving occupies the device, the copy starts only when device 0 is
    done, so the inference ends later by exactly the transfer's time."""
    graph, plain = chain_model(coefficients())
    c = int(graph.out_channels[2])
    batch = one_mapping(graph, 2, sizes={2: [3 * c // 4, c // 4]})  # conv1 (its Relu follows)
    cpu = dataclasses.replace(coefficients()["cpu"], receive_on_device=True)
    _, busy_recv = chain_model(Coefficients({"cpu": cpu}))
    transfer = 0.25 * graph.output_bytes[3] / 1e9  # the Relu's part over a 1 GB/s link
    t = plain.tables.t_work[0]
    assert 0.5 * (t[2] + t[3]) > transfer  # device 0 is still busy when the part could arrive
    later = busy_recv.evaluate(batch).latency_s - plain.evaluate(batch).latency_s
    assert later[0] == pytest.approx(transfer, rel=1e-6)


def test_memory_by_weight_class_and_loading_peak_by_hand() -> None:
    """Resident weights: running = bias + coef x activations + per-class weight factors x
    weights + per segment; the peak RSS is the larger of that and the loading peak."""
    memory = Memory(
        coefficient=2.0,
        bias_mb=100.0,
        per_layer_mb=0.0,
        per_segment_mb=0.5,
        weights={"conv": 3.0, "other": 1.0},
        loading={"conv": 1.0, "other": 1.0},
    )
    cpu = dataclasses.replace(coefficients()["cpu"], memory=memory)
    graph, m = chain_model(Coefficients({"cpu": cpu}))
    batch = one_mapping(graph, 2)
    _, plain = chain_model(coefficients())
    peak_mb = plain.evaluate(batch).memory_mb[0, 0]  # the liveness peak (coefficient 1, bias 0)
    w_mb = graph.weight_bytes.sum() / 1e6  # every weight is a conv's
    run = 100.0 + 2.0 * (peak_mb - w_mb) + 3.0 * w_mb + 0.5 * 1
    assert m.evaluate(batch).memory_mb[0, 0] == pytest.approx(run)
    running, loading = m.memory_phases(batch)  # each phase apart: the larger is the peak
    assert running[0, 0] == pytest.approx(run) and loading[0, 0] == pytest.approx(100.0 + w_mb)
    cpu = dataclasses.replace(
        cpu, memory=dataclasses.replace(memory, loading={"conv": 50.0, "other": 1.0})
    )
    _, m = chain_model(Coefficients({"cpu": cpu}))
    assert m.evaluate(batch).memory_mb[0, 0] == pytest.approx(100.0 + 50.0 * w_mb)
    running, loading = m.memory_phases(batch)
    assert running[0, 0] == pytest.approx(run)
    assert loading[0, 0] == pytest.approx(100.0 + 50.0 * w_mb)
    assert np.isnan(plain.memory_phases(batch)[1][0, 0])  # no loading terms: no loading phase


def test_cut_cost_per_byte_by_crossing_kind_by_hand() -> None:
    """conv0 and relu0 on the device the image enters, the rest on another: the cut costs 2 ns
    per byte of relu0's output between boards and 0.5 ns within one, beside the link's time;
    without a cost of its own within a board (None), a crossing there costs the 2 ns."""
    graph, _ = board_pair_model(0.0, None)
    n = len(graph)
    nbytes = graph.layers[1].output_bytes

    def extra(per_byte: float, same_host: float | None, first: int, rest: int) -> float:
        """The latency beyond the work: the one crossing's time."""
        _, m = board_pair_model(per_byte, same_host, entry=first)
        ev = m.evaluate(whole_on(graph, 3, [first] * 2 + [rest] * (n - 2)))
        return float(ev.latency_s[0] - m.tables.t_work[0].sum())

    assert extra(2e-9, 0.5e-9, 0, 1) == pytest.approx(nbytes / 1e9 + nbytes * 2e-9, rel=1e-6)
    assert extra(2e-9, 0.5e-9, 1, 2) == pytest.approx(nbytes / 1e10 + nbytes * 0.5e-9, rel=1e-6)
    assert extra(2e-9, None, 1, 2) == pytest.approx(nbytes / 1e10 + nbytes * 2e-9, rel=1e-6)
