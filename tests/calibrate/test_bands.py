"""Calibration's row bands (dse.calibrate.bands): a band's model reads the input rows its band
needs and computes those rows of its layer; each row-splittable convolution is timed once per
layer key, whole and as bands, interleaved, with the device's threads."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tests.helpers.onnx_factory as f
from dse.calibrate import bands, channels
from dse.calibrate.bands import band_model, band_rows, measure_band_costs
from dse.net import ops
from dse.net.build import build_graph
from models_analytical.layer_costs import family, layer_key

#: name -> (weight shape, attributes, bias): each a Conv reading x [1, 4, 9, 10]
CONVS = {
    "pad1": ([6, 4, 3, 3], {"pads": [1, 1, 1, 1]}, True),
    "same_key": ([6, 4, 3, 3], {"pads": [1, 1, 1, 1]}, True),  # pad1 again: one key
    "stride2": ([6, 4, 3, 3], {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
    "grouped_dilated": (
        [6, 2, 3, 3], {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 2}, True
    ),
    "valid": ([5, 4, 3, 3], {}, False),
    "same_upper": ([6, 4, 4, 3], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
    "same_lower": ([6, 4, 2, 2], {"auto_pad": "SAME_LOWER"}, True),
    "one_row": ([3, 4, 9, 1], {}, False),  # 1 output row: no band to time
}  # fmt: skip


def convs():
    """Every conv of CONVS reading x, each its own output: the model and its graph."""
    nodes, inits, outs = [], [], []
    for i, (name, (w, attrs, bias)) in enumerate(CONVS.items()):
        inputs = ["x", f"w_{name}"] + ([f"b_{name}"] if bias else [])
        nodes.append(helper.make_node("Conv", inputs, [name], name=name, **attrs))
        inits.append(f.weight(f"w_{name}", w, seed=i))
        if bias:
            inits.append(f.weight(f"b_{name}", [w[0]], seed=i))
        outs.append(name)
    model = f.model(nodes, {"x": [1, 4, 9, 10]}, outs, inits)
    return model, build_graph(model, "convs")


def test_auto_pad_same_is_made_explicit_as_onnx_resolves_it() -> None:
    """SAME_UPPER, stride 2, a 4x3 kernel over 9x10: 3 rows of padding (1 above, 2 below), 1
    column (0 left, 1 right); SAME_LOWER, a 2x2 kernel: the odd pixel before (1 above, 1
    left); explicit pads stay as they are (ops.same_pads, the band model's pads)."""
    assert ops.same_pads(9, 4, 2, "SAME_UPPER") == (1, 2)
    assert ops.same_pads(10, 3, 2, "SAME_UPPER") == (0, 1)
    assert ops.same_pads(9, 2, 1, "SAME_LOWER") == (1, 0)
    model, g = convs()
    layer = {x.name: x for x in g}

    def pads(name: str, band: tuple[int, int]) -> list[int]:
        built = band_model(layer[name], {n.name: n for n in model.graph.node}[name], band)
        assert built is not None
        attrs = {a.name: helper.get_attribute_value(a) for a in built[0].graph.node[0].attribute}
        assert "auto_pad" not in attrs
        return list(attrs["pads"])

    full = {name: int(layer[name].output_shape[2]) for name in layer}
    assert pads("same_upper", (0, full["same_upper"])) == [1, 0, 2, 1]
    assert pads("same_lower", (0, full["same_lower"])) == [1, 1, 0, 0]
    assert pads("pad1", (0, full["pad1"])) == [1, 1, 1, 1]


def test_a_band_reads_the_rows_it_needs_and_computes_its_rows_of_the_layer() -> None:
    """For every row-splittable conv (padded, strided, grouped and dilated, unpadded, auto_pad
    SAME) and every band timed (the top ones of band_rows) and an inner and a bottom band, the
    band's model reads exactly the rows RowWindow.needed gives (stride 2, pad 1: band [0, 2)
    reads rows [0, 4), band [2, 4) rows [3, 8), by hand) and computes those output rows of the
    whole layer (the node as it is, with the band model's own weights, in onnxruntime)."""
    model, g = convs()
    x = np.random.default_rng(0).random((1, 4, 9, 10), dtype=np.float32)
    layers = {layer.name: layer for layer in g}
    stride2 = layers["stride2"]
    assert band_model(stride2, model.graph.node[stride2.node], (0, 2))[1] == (0, 4)
    assert band_model(stride2, model.graph.node[stride2.node], (2, 4))[1] == (3, 8)
    checked = 0
    for layer in g:
        if not g.row_splittable[layer.index] or g.out_rows[layer.index] < 2:
            continue
        node = model.graph.node[layer.node]
        full = int(g.out_rows[layer.index])
        window = ops.row_window(layer)
        for band in [(0, r) for r in band_rows(full)] + [(1, full - 1), (full // 2, full)]:
            built, (lo, hi) = band_model(layer, node, band, seed=layer.index)
            assert (lo, hi) == window.needed(*band, 9)
            whole = helper.make_model(
                helper.make_graph(
                    [node],
                    "whole",
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 10])],
                    [helper.make_tensor_value_info(layer.name, TensorProto.FLOAT, None)],
                    list(built.graph.initializer),
                ),
                opset_imports=[helper.make_opsetid("", 13)],
                ir_version=8,
            )
            want = ort.InferenceSession(whole.SerializeToString()).run(None, {"x": x})[0]
            sess = ort.InferenceSession(built.SerializeToString())
            assert sess.get_inputs()[0].shape == [1, 4, hi - lo, 10]
            got = sess.run(None, {"x": x[:, :, lo:hi]})[0]
            np.testing.assert_allclose(got, want[:, :, band[0] : band[1]], rtol=1e-5, atol=1e-6)
            checked += 1
    assert checked == 7 * 6  # 7 convs of 2 rows or more, 6 bands each


def test_band_rows_are_a_quarter_a_half_three_quarters_and_all() -> None:
    assert band_rows(56) == [14, 28, 42, 56]
    assert band_rows(13) == [3, 7, 10, 13]  # 3.25, 6.5 (up), 9.75
    assert band_rows(3) == [1, 2, 3]  # 0.75 -> 1, 1.5 -> 2, 2.25 -> 2
    assert band_rows(2) == [1, 2]
    assert band_rows(1) == [1]


def test_each_row_splittable_conv_is_timed_once_per_key_whole_and_as_bands(monkeypatch) -> None:
    """measure_band_costs times every row-splittable conv whose key is not in ``seen`` (not
    'same_key', pad1's twin; not 'valid', given as seen; not 'one_row', 1 output row), whole and
    as its bands, in sessions of the device's threads; ``seen`` gets the keys timed; each
    band's time is the median of its rounds; each reads its band's input rows."""
    model, g = convs()
    layers = {layer.name: layer for layer in g}
    made: list[tuple[str, int]] = []
    real = bands.session

    def counted(m, kind: str, threads: int):  # noqa: ANN001, ANN202 - a session, recorded
        made.append((kind, threads))
        return real(m, kind, threads)

    fed: list[list[tuple[int, ...]]] = []

    def timed(runs, repeats: int) -> list[list[float]]:  # noqa: ANN001
        assert repeats == 2
        fed.extend([[feeds["x"].shape for _, feeds in case] for case in runs])
        return channels.time_interleaved(runs, repeats)

    monkeypatch.setattr(bands, "session", counted)
    monkeypatch.setattr(bands, "time_interleaved", timed)
    seen = {layer_key(layers["valid"])}
    rows = measure_band_costs(SimpleNamespace(graph=g, model=model), 3, 2, seen)
    timed_layers = ["pad1", "stride2", "grouped_dilated", "same_upper", "same_lower"]
    assert list(dict.fromkeys(r["layer"] for r in rows)) == [f"convs/{n}" for n in timed_layers]
    assert seen == {layer_key(layers[n]) for n in [*timed_layers, "valid"]}
    for i, name in enumerate(timed_layers):
        layer = layers[name]
        full = int(g.out_rows[layer.index])
        mine = [r for r in rows if r["layer"] == f"convs/{name}"]
        assert [r["rows"] for r in mine] == band_rows(full)
        for r in mine:
            assert r["key"] == layer_key(layer) and r["family"] == family(layer)
            assert r["full"] == full and r["seconds"] > 0
        needed = [ops.row_window(layer).needed(0, b, 9) for b in band_rows(full)]
        assert fed[i] == [(1, 4, hi - lo, 10) for lo, hi in needed]
    assert made == [("cpu", 3)] * len(rows)


def test_layers_are_timed_interleaved_after_a_warm_up_round(monkeypatch) -> None:
    """Every round runs each session of each case once, in order; the first round is not
    kept; each time is the median of the rounds kept (a clock that advances a known time per
    run)."""
    clock = [0.0]
    order: list[str] = []

    class Fake:
        def __init__(self, name: str, times: list[float]) -> None:
            self.name, self.times = name, iter(times)

        def run(self, names, feeds) -> None:  # noqa: ANN001
            order.append(self.name)
            clock[0] += next(self.times)

    monkeypatch.setattr(channels, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    runs = [
        [(Fake("a1", [9.0, 1.0, 3.0, 2.0]), {}), (Fake("a2", [9.0, 4.0, 4.0, 5.0]), {})],
        [(Fake("b1", [9.0, 7.0, 6.0, 8.0]), {})],
    ]
    assert channels.time_interleaved(runs, 3) == [[2.0, 4.0], [7.0]]
    assert order == ["a1", "a2", "b1"] * 4


def test_the_bands_unit_answers_its_request_as_a_rank_prints_it(capsys) -> None:
    """``python -m dse.calibrate.ondevice REQUEST`` with a bands request (what a rank on a
    device runs): its result, one JSON line after the mark, times alexnet's row-splittable
    convs not in ``seen`` (here conv5 alone), whole and as bands."""
    from dse.calibrate import ondevice
    from dse.net import load_net

    graph = load_net({"name": "alexnet"}).graph
    convs = {x.name: layer_key(x) for x in graph if graph.row_splittable[x.index]}
    assert list(convs) == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    seen = [k for name, k in convs.items() if name != "conv5"]
    request = {"step": "bands", "net": "alexnet", "threads": 1, "repeats": 1, "seen": seen}
    assert ondevice.main([json.dumps(request)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(ondevice.MARK)
    rows = json.loads(line[len(ondevice.MARK) :])["rows"]
    assert [(r["layer"], r["rows"], r["full"]) for r in rows] == [
        ("alexnet/conv5", n, 13) for n in band_rows(13)
    ]
    assert {r["key"] for r in rows} == {convs["conv5"]} and rows[0]["family"] == "conv_grouped"


@pytest.mark.mpi
def test_a_unit_whose_mpiexec_fails_at_startup_is_started_again(tmp_path) -> None:
    """A unit run as a rank on a device (calibration on boards): Open MPI's launcher failing at
    startup twice, then running, gives the unit's result on the third launch."""
    import yaml

    from dse.calibrate import ondevice
    from dse.paths import CONF_DIR
    from dse.platform import load_platform
    from dse.runtime.launch.mpiexec import Launcher
    from tests.helpers.mpi import flaky_mpiexec

    platform = load_platform(yaml.safe_load((CONF_DIR / "platform/localhost.yaml").read_text()))
    launcher = Launcher(mpiexec=flaky_mpiexec(tmp_path, failures=2))
    request = {"step": "channels", "threads": 1, "repeats": 1}
    rows = ondevice.run_on_device(platform, 0, launcher, request)["rows"]
    assert (tmp_path / "launches").read_text().strip() == "3"
    assert {r["case"] for r in rows} == {0, 1} and all(r["seconds"] > 0 for r in rows)
