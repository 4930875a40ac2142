"""Calibration and fidelity: fits recover known coefficients, the profiler's kernels map back to
every layer of the zoo, the model reads what calibration writes, the statistics by hand."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from cli import run_module
from onnx_factory import conv_relu_chain
from platforms import coefficients, platform

from dse.calibrate.profile import layer_for_kernel, profile_model
from dse.fidelity import stats
from dse.mapping import Mappings, check, random_mappings
from dse.mapping import whole as whole_on
from dse.net import load_net, zoo
from dse.net.graph import build_graph
from models_analytical.calibration import fit_channel_block, fit_part_fixed, fit_regression
from models_analytical.coefficients import Coefficients, load_coefficients
from models_analytical.layer_costs import family, layer_key
from models_analytical.model import AnalyticalModel


def test_regression_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(0)
    true = {"conv": [2e-5, 3e-11, 1e-10, 0.0], "pool": [1e-6, 0.0, 4e-10, 0.0]}
    fams, terms, secs = [], [], []
    for fam, c in true.items():
        for _ in range(20):
            t = np.array([1.0, rng.uniform(1e6, 1e9), rng.uniform(1e4, 1e7), 0.0])
            fams.append(fam)
            terms.append(t)
            secs.append(float(np.dot(c, t)))
    fit = fit_regression(fams, np.array(terms), np.array(secs))
    for fam, c in true.items():
        np.testing.assert_allclose(fit[fam], c, rtol=1e-3, atol=1e-14)


def test_channel_block_recovered_from_synthetic_parts() -> None:
    channels = np.array([4, 8, 12, 16, 24, 32, 40, 48, 64] * 2, dtype=float)
    case = np.repeat([0, 1], 9)
    scale = np.where(case == 0, 1e-5, 3e-5)
    seconds = 2e-4 + scale * np.ceil(channels / 8) * 8
    assert fit_channel_block(channels, case, seconds)[0] == 8
    # without blocks the smallest block (1) is kept
    assert fit_channel_block(channels, case, 2e-4 + scale * channels)[0] == 1


def test_kernel_names_map_to_layers() -> None:
    index = {"conv1": 0, "relu1": 1, "norm1": 2, "fc6": 3}
    assert layer_for_kernel("relu1_nchwc", index) == 1
    assert layer_for_kernel("fused fc6", index) == 3
    assert layer_for_kernel("norm1_bn_nchwc", index) == 2
    assert layer_for_kernel("relu1_nchwc_token_3", index) == 1
    assert layer_for_kernel("ReorderOutput_token_16", index) is None


@pytest.mark.parametrize("name", ["alexnet", "resnet50", "googlenet", "mobilenetv2", "densenet121"])
def test_profile_covers_every_layer_of_the_zoo(name: str) -> None:
    """Every layer gets a time, and the layers' times add up to the kernels' (nothing lost or
    counted twice when fused kernels are shared out)."""
    net = load_net({"name": name})
    g = net.graph
    prior = g.macs / 1e10 + g.output_bytes / 1e10
    prof = profile_model(zoo.materialize(name, 0), g, prior, warmup=0, runs=1)
    assert (prof.layer_s > 0).all(), [
        lay.name for lay, t in zip(g, prof.layer_s, strict=True) if t <= 0
    ]
    assert set(prof.unmapped) <= {n for n in prof.unmapped if n.startswith("Reorder")}
    assert prof.layer_s.sum() == pytest.approx(prof.kernel_s, rel=1e-9)


def _chain_model(coeff: Coefficients, n_dev: int = 2):
    graph = build_graph(conv_relu_chain(), "chain")
    return graph, AnalyticalModel(graph, platform(n_dev, bw=1e9), coeff)


def _mapping(graph, n_dev: int, devices=None, sizes=None) -> Mappings:
    """One mapping: layer i on ``devices[i]`` (default: all on device 0), the splittable
    layers given in ``sizes`` (layer index -> channels per device) split so."""
    m = whole_on(graph, n_dev, np.zeros(len(graph), int) if devices is None else devices)
    for layer, per_device in (sizes or {}).items():
        m.sizes[0, int(np.searchsorted(graph.split_layers, layer))] = per_device
    check(graph, n_dev, m)
    return m


def _conv1_split(graph, m: AnalyticalModel, parts: list[float]):
    """The chain on device 0 but conv1 (layer 2, 256 channels) split by ``parts`` (shares)
    over two devices: the model's evaluation."""
    c = int(graph.out_channels[2])
    sizes = [round(s * c) for s in parts]
    return m.evaluate(_mapping(graph, 2, sizes={2: sizes}))


def test_model_uses_profiled_and_regressed_layer_times() -> None:
    graph, _ = _chain_model(coefficients())
    base = coefficients()["cpu"]
    keys = [layer_key(layer) for layer in graph]
    # conv0 profiled at 5 ms; the relus regressed at 1 ms + 1e-9 s per activation byte
    reg = {"elementwise": [1e-3, 0.0, 1e-9, 0.0]}
    cpu = dataclasses.replace(base, layer_s={keys[0]: 5e-3}, regression=reg)
    _, m = _chain_model(Coefficients({"cpu": cpu}))
    t = m.tables.t_work[0]
    assert t[0] == pytest.approx(5e-3)
    relu = graph.layers[1]
    act = sum(x.nbytes for x in relu.inputs) + relu.output_bytes
    assert t[1] == pytest.approx(1e-3 + 1e-9 * act)
    # conv1 is neither profiled nor of a regressed family: Eq. 4.7 (MACs / rate)
    assert t[2] == pytest.approx(graph.macs[2] / 1e6)
    assert list(m.tables.source[0]) == [1, 2, 0, 2, 0, 2]


def test_split_conv_parts_cost_whole_channel_blocks() -> None:
    """A 256-channel conv split 8 / 248 channels with blocks of 16: the small part costs
    16 / 256 of the layer, the large one 256 / 256 (capped), by hand; the Relu after it runs
    on the parts by their shares (no channel blocks)."""
    base = coefficients()["cpu"]
    cpu = dataclasses.replace(base, channel_block=16)
    graph, m = _chain_model(Coefficients({"cpu": cpu}))
    ev = _conv1_split(graph, m, [8 / 256, 248 / 256])
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
    graph, _ = _chain_model(coefficients())
    conv = graph.layers[2]
    if how == "timed":
        extra = {"part_fixed": {layer_key(conv): 0.25}}
    else:
        extra = {"part_fixed_channels": {family(conv): 64.0}}
    cpu = dataclasses.replace(
        coefficients()["cpu"], channel_block=16, split_work_factor=1.5, **extra
    )
    _, m = _chain_model(Coefficients({"cpu": cpu}))
    ev = _conv1_split(graph, m, [8 / 256, 248 / 256])
    t = m.tables.t_work[0]
    assert graph.follows[3] == 2
    small = (0.25 + 0.75 * 16 / 256) * 1.5
    assert ev.busy_s[0, 1] == pytest.approx(t[2] * 1.5 + t[3] * 248 / 256 * 1.5)
    rest = t.sum() - t[2] - t[3]
    assert ev.busy_s[0, 0] == pytest.approx(rest + t[2] * small + t[3] * 8 / 256 * 1.5)
    # conv0 is of conv1's family: it has the family's share too (not timed), but unsplit it
    # costs the whole layer (rest, above)
    assert m.tables.part_fixed[0, 0] == (0.0 if how == "timed" else pytest.approx(0.25))


def test_part_fixed_shares_recovered_from_synthetic_parts() -> None:
    """Four 'conv' layers with noise-free lines and known fixed shares, not proportional to
    1 / channels: each layer's share comes back, and the family's beta is the least-squares
    fit of f ~ beta / channels weighted by the whole times (numpy's lstsq on rows scaled by
    the weights' square roots); a line that is nearly all intercept is capped; a family of
    two layers gets no beta (fewer than three)."""
    fulls, fs, wholes = (32, 64, 128, 256), (0.3, 0.1, 0.08, 0.02), (1e-3, 2e-3, 3e-3, 4e-3)
    rows = []
    for i, (full, f, whole) in enumerate(zip(fulls, fs, wholes, strict=True)):
        for c in {full // 4, full // 2, 3 * full // 4, full}:
            t = whole * (f + (1 - f) * c / full)
            rows.append(
                {"key": f"k{i}", "family": "conv", "channels": c, "full": full, "seconds": t}
            )
    for i, f in enumerate((0.2, 0.99)):
        for c in (64, 128):
            t = 1e-3 * (f + (1 - f) * c / 128)
            rows.append({"key": f"o{i}", "family": "fc", "channels": c, "full": 128, "seconds": t})
    per_layer, per_family, err = fit_part_fixed(rows)
    for i, f in enumerate(fs):
        assert per_layer[f"k{i}"] == pytest.approx(f, rel=1e-6)
    assert per_layer["o0"] == pytest.approx(0.2, rel=1e-6)
    assert per_layer["o1"] == pytest.approx(0.9)  # 0.99 capped
    sw = np.sqrt(wholes)
    beta = np.linalg.lstsq((sw / np.array(fulls))[:, None], sw * np.array(fs), rcond=None)[0][0]
    assert per_family == {"conv": pytest.approx(beta, rel=1e-9)}
    assert err == pytest.approx(0.0, abs=1e-9)


def test_a_layer_timed_alone_as_parts_is_that_layer_sliced() -> None:
    """The one-layer models calibration times: AlexNet's conv1 with 48 of its 96 channels
    computes the first 48 channels of conv1 with 96 (same random weights, onnxruntime); a
    grouped convolution is left out; parts are whole blocks near 1/4, 1/2, 3/4."""
    import onnxruntime as ort

    from dse.calibrate.channels import one_layer, part_channels

    assert part_channels(96, 16) == [32, 48, 80, 96]
    assert part_channels(32, 16) == [16, 32]
    assert part_channels(8, 16) == [8]
    net = load_net({"name": "alexnet"})
    conv1 = next(layer for layer in net.graph if layer.name == "conv1")
    node = net.model.graph.node[conv1.node]
    x = np.random.default_rng(0).random(conv1.inputs[0].shape, dtype=np.float32)
    out = {}
    for c in (48, 96):
        sess = ort.InferenceSession(one_layer(conv1, node, c).SerializeToString())
        out[c] = sess.run(None, {"x": x})[0]
    assert out[48].shape[1] == 48 and out[96].shape[1] == 96
    np.testing.assert_allclose(out[48], out[96][:, :48], rtol=1e-5, atol=1e-6)
    grouped = next(
        layer for layer in net.graph if layer.op == "Conv" and layer.attrs.get("group", 1) > 1
    )
    assert one_layer(grouped, net.model.graph.node[grouped.node], 64) is None


@pytest.mark.parametrize("hosts", ["one", "two"])
def test_work_runs_slower_while_another_device_of_its_host_has_work(hosts: str) -> None:
    """shared_host_factor 1.5: a vertical cut over two devices of one host runs every layer
    1.5x as long (latency and busy time by hand); on two hosts, or on one device, as before."""
    from dse.platform import Device, Link, Platform

    devices = tuple(
        Device(
            f"h{i if hosts == 'two' else 0}_cpu{i}", f"h{i if hosts == 'two' else 0}", "cpu", 1, 1e4
        )
        for i in range(2)
    )
    plat = Platform(
        "t", devices, {"network": Link(0.0, 1e12), "same_host": Link(0.0, 1e12)}, entry=0
    )
    cpu = dataclasses.replace(coefficients()["cpu"], shared_host_factor=1.5)
    graph = build_graph(conv_relu_chain(), "chain")
    m = AnalyticalModel(graph, plat, Coefficients({"cpu": cpu}))
    t = m.tables.t_work[0]
    n = len(graph)
    # conv0, relu0 on device 0, the rest on device 1; everything on device 1
    ev = m.evaluate(whole_on(graph, 2, [[0, 0] + [1] * (n - 2), [1] * n]))
    slow = 1.5 if hosts == "one" else 1.0
    assert ev.busy_s[0, 0] == pytest.approx(slow * t[:2].sum())
    assert ev.busy_s[0, 1] == pytest.approx(slow * t[2:].sum())
    assert ev.latency_s[0] == pytest.approx(slow * t.sum(), rel=1e-6)
    assert ev.busy_s[1, 1] == pytest.approx(t.sum())


def test_a_device_that_only_holds_an_absorbed_layers_share_slows_no_one() -> None:
    """Two devices on host A, one on host B, shared_host_factor 1.5: conv1 split over a0 and
    b2; the Relu after it runs on those parts, whatever its own shares say (here a1). a1
    computes nothing, so nothing on a0 is slower: busy times equal those at factor 1."""
    from dse.platform import Device, Link, Platform

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
    batch = _mapping(graph, 3, devices, {2: [half, 0, half]})
    busy = {}
    for factor in (1.0, 1.5):
        cpu = dataclasses.replace(coefficients()["cpu"], shared_host_factor=factor)
        busy[factor] = AnalyticalModel(graph, plat, Coefficients({"cpu": cpu})).evaluate(batch)
    assert busy[1.5].busy_s[0, 1] == 0.0
    np.testing.assert_allclose(busy[1.5].busy_s, busy[1.0].busy_s)


def test_shared_host_factor_fitted_against_the_one_device_run() -> None:
    """Ranks of cut mappings that compute 1.04x, 1.06x and 1.04x what the model says while the
    one-device run of the same rounds computes 1.02x: the factor is the median, 1.04 / 1.02;
    a rank under 2 ms of work is left out."""
    from types import SimpleNamespace

    from dse.calibrate.__main__ import fit_shared_host

    plat = platform_localhost()
    names = [d.name for d in plat.devices]

    def run(label: str, busy: list[float], measured: list[float]) -> dict:
        ev = SimpleNamespace(busy_s=np.array([busy]))
        model = SimpleNamespace(evaluate=lambda mapping: ev)
        ranks = [
            {"device": names[d], "compute_ms": {"median": ms}} for d, ms in enumerate(measured)
        ]
        return {
            "net": "n",
            "label": label,
            "model": model,
            "mapping": None,
            "result": {"ranks": ranks},
        }

    runs = [
        run("single", [0.050, 0.0], [51.0, 0.0]),
        run("vertical", [0.030, 0.020], [31.2, 21.2]),
        run("split", [0.030, 0.001], [31.2, 5.0]),  # device 1: 1 ms of work, left out
    ]
    factor, prov = fit_shared_host(runs, plat)
    assert factor == pytest.approx(1.04 / 1.02)
    assert prov["ranks"] == 3
    # the deployments' two devices on two hosts: nothing to fit, factor 1
    assert fit_shared_host(runs, platform(2))[0] == 1.0
    # ranks faster than the one-device run: the factor stays 1
    faster = [
        run("single", [0.050, 0.0], [51.0, 0.0]),
        run("vertical", [0.030, 0.020], [30.0, 20.0]),
    ]
    assert fit_shared_host(faster, plat)[0] == 1.0
    # a one-device run under 2 ms gives no reference: nothing fitted, factor 1
    tiny = [run("single", [0.001, 0.0], [1.0, 0.0]), run("vertical", [0.030, 0.020], [33.0, 22.0])]
    assert fit_shared_host(tiny, plat) == (
        1.0,
        {"factor": 1.0, "ranks": 0, "median_per_network": {}, "p10_p90": []},
    )


def test_measured_link_table_and_cut_costs() -> None:
    """A transfer takes the link table's time (linear between its points) plus the cut cost."""
    table = {"bytes": [1e3, 1e6], "seconds": [1e-5, 1e-3]}
    cpu = dataclasses.replace(coefficients()["cpu"], transfer_fixed_s=2e-4)
    coeff = Coefficients({"cpu": cpu}, links={"network": table})
    graph, m = _chain_model(coeff)
    n = len(graph)
    ev = m.evaluate(whole_on(graph, 2, [0, 0] + [1] * (n - 2)))  # conv0, relu0 on device 0
    nbytes = graph.layers[1].output_bytes
    link = 1e-5 + (nbytes - 1e3) * (1e-3 - 1e-5) / (1e6 - 1e3)
    assert ev.latency_s[0] == pytest.approx(m.tables.t_work[0].sum() + link + 2e-4)


def test_coefficients_round_trip_with_calibrated_fields(tmp_path) -> None:
    cpu = dataclasses.replace(
        coefficients()["cpu"],
        layer_s={"abc": 1e-3},
        regression={"conv": [1.0, 2.0, 3.0, 4.0]},
        channel_block=16,
        part_fixed={"abc": 0.3},
        part_fixed_channels={"conv": 9.0},
        transfer_fixed_s=1e-4,
        transfer_per_byte_s=1e-10,
        memory_weights={"conv": 2.0, "other": 1.0},
        memory_loading={"conv": 2.5, "other": 1.5},
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
    with pytest.raises(Exception, match=r"part_fixed must be a mapping \(a JSON object\)"):
        load_coefficients(path)
    raw = c.to_dict()
    raw["cpu"]["part_fixed"]["abc"] = 1.2
    path.write_text(json.dumps(raw))
    with pytest.raises(Exception, match=r"part_fixed.abc must be a share in \[0, 1\)"):
        load_coefficients(path)
    raw = c.to_dict()
    raw["links"]["x"]["bytes"] = [2, 1]
    path.write_text(json.dumps(raw))
    with pytest.raises(Exception, match="'bytes' must increase"):
        load_coefficients(path)


def test_fidelity_statistics_by_hand() -> None:
    s = stats([110.0, 90.0, 100.0, 130.0], [100.0, 100.0, 100.0, 100.0 * 1.2])
    # errors 10, 10, 0, 8.333 % -> MAPE 7.083 %; all four within 10 %
    assert s["mape_pct"] == pytest.approx((10 + 10 + 0 + 100 * 10 / 120) / 4)
    assert s["within_10_pct"] == pytest.approx(100.0)
    s = stats([1.0, 2.0, 3.0, 5.0], [1.0, 3.0, 2.0, 4.0])
    # ranks (1,2,3,4) vs (1,3,2,4): d^2 = 0+1+1+0 -> rho = 1 - 6*2/(4*15) = 0.8
    assert s["spearman"] == pytest.approx(0.8)
    # concordant pairs 5, discordant 1 of 6 -> tau = 4/6
    assert s["kendall"] == pytest.approx(4 / 6)


@pytest.mark.parametrize("kind", ["single", "vertical", "split", "mixed"])
def test_random_mappings_are_valid_whole_channel_mappings(kind: str) -> None:
    graph = build_graph(conv_relu_chain(), "chain")
    m = random_mappings(graph, 3, kind, 12, np.random.default_rng(1))
    check(graph, 3, m)  # every layer placed, whole channels covering each splittable layer
    share, _ = m.dense(graph)
    np.testing.assert_allclose(share.sum(axis=2), 1.0)
    split = (share > 0).sum(axis=2) > 1
    assert not (split & ~graph.splittable[None]).any()
    if kind in ("single", "vertical"):
        assert not split.any()
    if kind == "split":
        assert split[:, graph.splittable].all()


def test_quick_calibration_writes_a_file_later_commands_use(tmp_path) -> None:
    """quick=true (one net, few repeats, no MPI deployments) writes a valid calibrated file,
    and dse.evaluate with the same platform then uses it: its single-device prediction is the
    profiled whole-run time."""
    env_dir = tmp_path / "calibration"
    out = run_module(
        "dse.calibrate",
        "platform=localhost",
        "quick=true",
        "deployments=false",
        env={"DSE_CALIBRATION_DIR": str(env_dir)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    path = env_dir / "localhost.json"
    c = load_coefficients(path)
    assert c.calibrated and c.links["same_host"]["seconds"]
    doc = json.loads(path.read_text())
    whole_ms = doc["provenance"]["kinds"]["cpu"]["profiled_networks"]["alexnet"]["whole_ms"]
    net = load_net({"name": "alexnet"})
    m = AnalyticalModel(net.graph, platform_localhost(), c)
    assert m.tables.source[0].min() == 1  # every layer profiled
    assert m.tables.t_work[0].sum() * 1e3 == pytest.approx(whole_ms, rel=1e-3)


def platform_localhost():
    import yaml

    from dse.cli import CONF_DIR
    from dse.platform import load_platform

    return load_platform(yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text()))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("googlenet", "vertical"),
        ("googlenet", "split"),
        ("googlenet", "mixed"),
        ("densenet121", "vertical"),  # cuts in dense blocks: sends wait for their deadline
    ],
)
def test_model_counts_the_segments_the_partitioner_cuts(name: str, kind: str) -> None:
    """The model's segments per device (its memory's per-segment term) equal the number of
    sub-models the runtime's partitioner writes for that device."""
    from dse.runtime.partition import partition

    net = load_net({"name": name})
    g = net.graph
    plat = platform_localhost()
    batch = random_mappings(g, 2, kind, 3, np.random.default_rng(7))
    ev = AnalyticalModel(g, plat, coefficients()).evaluate(batch)
    for p in range(len(batch)):
        plan = partition(net, batch.take(p), plat).plan
        got = {r["device_index"]: len(r["segments"]) for r in plan["ranks"]}
        want = {d: int(ev.segments[p, d]) for d in range(2) if ev.used[p, d]}
        assert got == want


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("googlenet", "split"),
        ("googlenet", "mixed"),
        ("resnet50", "mixed"),
        ("densenet121", "vertical"),  # sends found late split sub-models already charged
    ],
)
def test_model_charges_the_sub_models_the_partitioner_writes(name: str, kind: str) -> None:
    """With 1 s per sub-model run (or 1 s per byte in, or out) and nothing else changed, a
    device's compute grows by the number of sub-models the partitioner writes for it (the
    bytes of their inputs, of their outputs, read from the sub-models' own ONNX graphs); and
    the model's compute of each sub-model's layers (dse.calibrate.submodels) adds up to the
    device's compute."""
    from dse.calibrate.submodels import features
    from dse.runtime.partition import partition

    net = load_net({"name": name})
    g = net.graph
    plat = platform_localhost()
    batch = random_mappings(g, 2, kind, 2, np.random.default_rng(11))
    base = AnalyticalModel(g, plat, coefficients())
    busy = base.evaluate(batch).busy_s
    extra = {}
    for term in ("segment_run_s", "segment_in_per_byte_s", "segment_out_per_byte_s"):
        cpu = dataclasses.replace(coefficients()["cpu"], **{term: 1.0})
        m = AnalyticalModel(g, plat, Coefficients({"cpu": cpu}))
        extra[term] = m.evaluate(batch).busy_s - busy
    for p in range(len(batch)):
        dep = partition(net, batch.take(p), plat)
        subs = features(dep, batch.take(p), base)
        for r in dep.plan["ranks"]:
            d = r["device_index"]
            mine = [f for f in subs.values() if f["device"] == d]
            assert extra["segment_run_s"][p, d] == pytest.approx(len(r["segments"]))
            assert extra["segment_in_per_byte_s"][p, d] == pytest.approx(
                sum(f["in_bytes"] for f in mine)
            )
            assert extra["segment_out_per_byte_s"][p, d] == pytest.approx(
                sum(f["out_bytes"] for f in mine)
            )
            assert sum(f["compute_s"] for f in mine) == pytest.approx(busy[p, d])
    assert extra["segment_in_per_byte_s"].max() > 0


def test_receive_occupies_the_receiving_device_by_hand() -> None:
    """A split layer's part made on device 1 is gathered on device 0, still busy with its
    larger part: when receiving occupies the device, the copy starts only when device 0 is
    done, so the inference ends later by exactly the transfer's time."""
    graph, plain = _chain_model(coefficients())
    c = int(graph.out_channels[2])
    batch = _mapping(graph, 2, sizes={2: [3 * c // 4, c // 4]})  # conv1 (its Relu follows)
    cpu = dataclasses.replace(coefficients()["cpu"], receive_on_device=True)
    _, busy_recv = _chain_model(Coefficients({"cpu": cpu}))
    transfer = 0.25 * graph.output_bytes[3] / 1e9  # the Relu's part over a 1 GB/s link
    t = plain.tables.t_work[0]
    assert 0.5 * (t[2] + t[3]) > transfer  # device 0 is still busy when the part could arrive
    later = busy_recv.evaluate(batch).latency_s - plain.evaluate(batch).latency_s
    assert later[0] == pytest.approx(transfer, rel=1e-6)


def test_sub_model_costs_recovered_from_synthetic_timings() -> None:
    """dse.calibrate.submodels.fit recovers the run, per-byte and split costs that made
    synthetic sub-model timings, at two process speeds."""
    from dse.calibrate.submodels import fit

    rng = np.random.default_rng(5)
    truth = {"run": 40e-6, "in": 0.08e-9, "out": 0.05e-9, "split": 1.1}
    samples = []
    for i in range(200):
        compute = rng.uniform(1e-4, 5e-3)
        split = compute * rng.integers(0, 2)
        inb, outb = rng.uniform(1e4, 3e6, size=2)
        speed = 1.0 if i % 2 else 1.05
        alone = speed * compute + truth["run"] + truth["in"] * inb + truth["out"] * outb
        alone += (truth["split"] - 1.0) * speed * split
        samples.append(
            {
                "device": i % 2,
                "compute_s": compute,
                "split_s": split,
                "in_bytes": inb,
                "out_bytes": outb,
                "alone_s": alone,
                "speed": speed,
                "net": "synthetic",
                "mapping": i // 20,
            }
        )
    got, prov = fit(samples)
    assert got["segment_run_s"] == pytest.approx(truth["run"], rel=1e-6)
    assert got["segment_in_per_byte_s"] == pytest.approx(truth["in"], rel=1e-6)
    assert got["segment_out_per_byte_s"] == pytest.approx(truth["out"], rel=1e-6)
    assert got["split_work_factor"] == pytest.approx(truth["split"], rel=1e-6)
    assert prov["median_abs_error_after"] < 1e-6 < prov["median_abs_error_before"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("alexnet", "split"),
        ("googlenet", "mixed"),
        ("densenet121", "mixed"),
        ("resnet50", "single"),
    ],
)
def test_model_holds_the_buffers_the_runtime_allocates(name: str, kind: str) -> None:
    """The model's held bytes per device equal what a rank of the partitioner's plan keeps
    for good (dse.runtime.worker.Rank): a buffer per tensor it receives or gathers, and the
    input image on the entry rank."""
    from dse.runtime.partition import partition

    net = load_net({"name": name})
    g = net.graph
    plat = platform_localhost()
    batch = random_mappings(g, 2, kind, 2, np.random.default_rng(3))
    held = AnalyticalModel(g, plat, coefficients()).memory_terms(batch)["held_mb"]
    for p in range(len(batch)):
        plan = partition(net, batch.take(p), plat).plan
        for r in plan["ranks"]:
            kept = 0
            for s in r["steps"]:
                if s["op"] in ("recv", "gather"):
                    gathered = s["op"] == "gather"
                    shape = s["shape"] if gathered else plan["tensors"][s["tensor"]]["shape"]
                    kept += 4 * int(np.prod(shape))  # float32
            if r["rank"] == plan["entry_rank"]:
                kept += sum(4 * int(np.prod(i["shape"])) for i in plan["inputs"])
            assert held[p, r["device_index"]] * 1e6 == pytest.approx(kept), (p, r["rank"])
    assert held.max() > 0


def test_memory_by_weight_class_and_loading_peak_by_hand() -> None:
    """Resident weights: running = bias + coef x activations + per-class weight factors x
    weights + per segment; the peak RSS is the larger of that and the loading peak."""
    cpu = dataclasses.replace(
        coefficients()["cpu"],
        memory_coefficient=2.0,
        memory_bias_mb=100.0,
        memory_per_segment_mb=0.5,
        memory_weights={"conv": 3.0, "other": 1.0},
        memory_loading={"conv": 1.0, "other": 1.0},
    )
    graph, m = _chain_model(Coefficients({"cpu": cpu}))
    batch = _mapping(graph, 2)
    _, plain = _chain_model(coefficients())
    peak_mb = plain.evaluate(batch).memory_mb[0, 0]  # the liveness peak (coefficient 1, bias 0)
    w_mb = graph.weight_bytes.sum() / 1e6  # every weight is a conv's
    run = 100.0 + 2.0 * (peak_mb - w_mb) + 3.0 * w_mb + 0.5 * 1
    assert m.evaluate(batch).memory_mb[0, 0] == pytest.approx(run)
    cpu = dataclasses.replace(cpu, memory_loading={"conv": 50.0, "other": 1.0})
    _, m = _chain_model(Coefficients({"cpu": cpu}))
    assert m.evaluate(batch).memory_mb[0, 0] == pytest.approx(100.0 + 50.0 * w_mb)


def test_split_parts_run_slower_by_the_split_work_factor() -> None:
    """Parts of a split layer (and of the Relu that follows it) cost share x time x factor;
    an unsplit layer is unaffected."""
    cpu = dataclasses.replace(coefficients()["cpu"], split_work_factor=1.5)
    graph, m = _chain_model(Coefficients({"cpu": cpu}))
    ev = _conv1_split(graph, m, [0.25, 0.75])
    t = m.tables.t_work[0]
    split = t[2] + t[3]  # conv1 and its Relu
    assert ev.busy_s[0, 1] == pytest.approx(split * 0.75 * 1.5)
    assert ev.busy_s[0, 0] == pytest.approx(t.sum() - split + split * 0.25 * 1.5)


def test_fidelity_measures_mappings_and_ends_with_its_summary_line(tmp_path) -> None:
    """dse.fidelity end to end on 3 mappings (1 iteration each, uncalibrated coefficients
    with a speed probe of alexnet as calibration keeps it): the CSV has a row per mapping,
    the JSON the statistics, the last line the summary."""
    import csv
    import re

    from dse.cli import CONF_DIR

    coeff = json.loads((CONF_DIR / "platform" / "localhost.json").read_text())
    fingerprint = load_net({"name": "alexnet"}).fingerprint
    coeff["speed_reference"] = {
        "threads": 1,
        "whole_ms": {"alexnet": 40.0},
        "fingerprints": {"alexnet": fingerprint},
    }
    (tmp_path / "c.json").write_text(json.dumps(coeff))
    out = tmp_path / "fid"
    res = run_module(
        "dse.fidelity",
        "+net=alexnet",
        "platform=localhost",
        "mappings=3",
        "warmup=0",
        "iterations=1",
        "rounds=2",
        f"coefficients={tmp_path / 'c.json'}",
        f"out={out}",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    last = res.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"fidelity alexnet: latency MAPE [\d.]+ %, within 10 % \d+ %, spearman \S+; "
        r"memory MAPE [\d.]+ %",
        last,
    ), last
    rows = list(csv.DictReader((out / "fidelity.csv").open()))
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    doc = json.loads((out / "fidelity.json").read_text())
    assert doc["latency"]["n"] == 3 and not doc["calibrated"]
    assert "not calibrated" in res.stderr
    assert (out / "fidelity.png").stat().st_size > 10_000
    for row in rows:  # two interleaved rounds of one iteration each, sub-models dropped
        lat = json.loads((out / "phase2" / row["mapping"] / "measurements.json").read_text())
        lat = lat["latency_ms"]
        assert len(lat["rounds_ms"]) == 2 and len(lat["all"]) == 2
        assert lat["median"] == pytest.approx(np.median(lat["rounds_ms"]), abs=1e-3)
        assert not list((out / "phase2" / row["mapping"]).glob("*.onnx"))
    assert doc["rounds"] == 2 and doc["round_spread_pct"] is not None
    assert set(doc["repeatability"]) == {"spearman_round_vs_round", "round_within_10_pct"}
    assert "repeatability" in res.stdout
    # every run is brought to the speed of the coefficients' probe of alexnet (40 ms)
    assert doc["drift"]["reference"] == "calibration" and doc["drift"]["reference_ms"] == 40.0
    probes = []
    for row in rows:
        lat = json.loads((out / "phase2" / row["mapping"] / "measurements.json").read_text())
        lat = lat["latency_ms"]
        probes += lat["rounds_probe_ms"]
        by_hand = np.median(np.array(lat["rounds_ms"]) * 40.0 / np.array(lat["rounds_probe_ms"]))
        assert float(row["latency_adjusted_ms"]) == pytest.approx(by_hand, rel=1e-3)
    slower = (np.median(probes) / 40.0 - 1) * 100
    assert doc["drift"]["slower_pct"] == pytest.approx(slower, abs=0.1)
    assert "than at calibration" in res.stdout
    predicted = np.array([float(r["latency_predicted_ms"]) for r in rows])
    adjusted = np.array([float(r["latency_adjusted_ms"]) for r in rows])
    measured = np.array([float(r["latency_measured_ms"]) for r in rows])
    assert doc["latency"]["drift_taken_out"]
    for key, against in (("latency", adjusted), ("latency_as_measured", measured)):
        mape = np.mean(np.abs(predicted - against) / against) * 100
        assert doc[key]["mape_pct"] == pytest.approx(mape, rel=1e-3)


def test_repeatability_of_rounds_by_hand(tmp_path) -> None:
    from dse.fidelity import repeatability

    rounds = {"m1": [10, 10, 10], "m2": [20, 22, 30], "m3": [30, 25, 21]}
    for name, r in rounds.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "measurements.json").write_text(
            json.dumps({"latency_ms": {"median": float(np.median(r)), "rounds_ms": r}})
        )
    rep = repeatability(tmp_path)
    # rounds 0-1 rank the mappings alike (1.0); 0-2 and 1-2 swap m2 and m3: 1 - 6*2/(3*8)
    assert rep["spearman_round_vs_round"] == pytest.approx(0.5)
    # within 10 % of the other rounds' median: m1 all 3; m2 none (20/26, 22/25, 30/21);
    # m3 only round 1 (25/25.5): 4 of 9
    assert rep["round_within_10_pct"] == pytest.approx(44.4)
    (tmp_path / "m3" / "measurements.json").write_text(json.dumps({"latency_ms": {}}))
    assert repeatability(tmp_path) is None  # a mapping without rounds: nothing to compare


def test_drift_is_taken_out_of_each_round_by_its_probe() -> None:
    from dse.runtime.measure import measured_latency_ms, merge_runs, take_out_drift

    def run(med: float, probes: list[float]) -> dict:
        return {"status": "ok", "latency_ms": {"median": med, "all": [med]}, "probe_ms": probes}

    # rounds of 10, 30 and 24 ms with the whole net alone taking (48+52)/2 = 50, 150 and 100 ms
    # beside them: at the reference's 100 ms, 20, 20 and 24 ms (median 20; as measured, 24)
    merged = merge_runs([run(10, [48, 52]), run(30, [150, 150]), run(24, [90, 110])])
    assert merged["latency_ms"]["rounds_probe_ms"] == [50, 150, 100]
    assert "probe_ms" not in merged
    drift = take_out_drift(merged, 100.0)["latency_ms"]["drift"]
    assert drift["rounds_adjusted_ms"] == [20, 20, 24] and drift["probe_ms"] == 100
    assert measured_latency_ms(merged) == 20 and merged["latency_ms"]["median"] == 24
    # a run without its probe after it (Ctrl-C came during that probe): nothing is scaled
    partial = merge_runs([run(10, [50, 50]), run(12, [50])])
    assert "rounds_probe_ms" not in partial["latency_ms"]
    assert measured_latency_ms(take_out_drift(partial, 100.0)) == 11


def _fake_launch(order: list) -> object:
    def launch(d, *args):  # noqa: ANN001, ANN002, ANN202
        order.append(d)
        return {"status": "ok", "latency_ms": {"median": 1.0, "all": [1.0]}}

    return launch


def test_interleaved_runs_have_a_probe_on_either_side(monkeypatch, tmp_path) -> None:
    """One probe before the first run and one after each: run k's probes are the k-th and
    (k+1)-th, whatever deployment it ran."""
    from dse.runtime import measure

    order: list = []
    ticks = iter(range(100))
    monkeypatch.setattr(measure, "launch", _fake_launch(order))
    dirs = [tmp_path / "a", tmp_path / "b"]
    merged, interrupted = measure.measure_interleaved(
        dirs, 2, 0, 1, 1.0, np.random.default_rng(0), probe=lambda: float(next(ticks))
    )
    assert not interrupted and len(order) == 4
    # probes 0 | run | 1 | run | 2 | run | 3 | run | 4: run k sits between probes k and k + 1
    for i, d in enumerate(dirs):
        ks = [k for k, x in enumerate(order) if x == d]
        assert merged[i]["latency_ms"]["rounds_probe_ms"] == [k + 0.5 for k in ks]


def test_ctrl_c_during_a_probe_keeps_the_run_before_it(monkeypatch, tmp_path) -> None:
    from dse.runtime import measure

    order: list = []
    calls = iter(range(100))
    monkeypatch.setattr(measure, "launch", _fake_launch(order))

    def probe() -> float:
        k = next(calls)
        if k == 2:  # the probe after the second run
            raise KeyboardInterrupt
        return 100.0

    dirs = [tmp_path / "a", tmp_path / "b"]
    merged, interrupted = measure.measure_interleaved(
        dirs, 3, 0, 1, 1.0, np.random.default_rng(0), probe=probe
    )
    assert interrupted and len(order) == 2
    assert all(m["status"] == "ok" for m in merged)  # each ran once: both runs kept
    second = dirs.index(order[1])
    assert "rounds_probe_ms" not in merged[second]["latency_ms"]  # its probe after never came
    assert merged[1 - second]["latency_ms"]["rounds_probe_ms"] == [100.0]


def test_fidelity_reads_the_calibration_probe_of_its_network() -> None:
    from types import SimpleNamespace

    from dse.fidelity import speed_reference

    plat = platform_localhost()  # 1 thread per device
    net = load_net({"name": "alexnet"})
    ref = {"threads": 1, "whole_ms": {"alexnet": 48.5}, "fingerprints": {}}
    ref["fingerprints"]["alexnet"] = net.fingerprint
    model = SimpleNamespace(platform=plat, coefficients=SimpleNamespace(notes={}))
    model.coefficients.notes["speed_reference"] = ref
    assert speed_reference(model, net) == 48.5
    assert speed_reference(model, load_net({"name": "googlenet"})) is None  # held out
    ref["fingerprints"]["alexnet"] = "another alexnet"  # same name, another network
    assert speed_reference(model, net) is None
    ref["fingerprints"]["alexnet"] = net.fingerprint
    ref["threads"] = 4  # probed at another thread count: not comparable
    assert speed_reference(model, net) is None
    model.coefficients.notes = {}
    assert speed_reference(model, net) is None


def test_probe_times_the_whole_model_on_each_core_of_the_platform(monkeypatch, tmp_path) -> None:
    import dataclasses
    import os
    import time

    from dse.runtime import probe as probe_mod
    from dse.runtime.measure import deploy
    from dse.runtime.partition import input_arrays
    from dse.runtime.reader import read_plan
    from dse.runtime.worker import whole_model_session

    plat = platform_localhost()
    allowed = os.sched_getaffinity(0)
    assert probe_mod.probe_cores(plat) == [c for c in ({0}, {1}) if c <= allowed]
    remote = dataclasses.replace(
        plat, devices=[dataclasses.replace(d, host="board7") for d in plat.devices]
    )
    assert probe_mod.probe_cores(remote) == [] and probe_mod.speed_probe(tmp_path, remote) is None
    net = load_net({"name": "mobilenetv2"})
    deploy(net, plat, whole_on(net.graph, 2, np.zeros(len(net.graph), int)), tmp_path / "d")
    probe = probe_mod.speed_probe(tmp_path / "d", plat)
    probe()  # loads its sessions
    bound: list[set[int]] = []
    real = os.sched_setaffinity
    monkeypatch.setattr(
        probe_mod.os, "sched_setaffinity", lambda p, c: bound.append(set(c)) or real(p, c)
    )
    ms = probe()
    # timed bound to each core set in turn, its cores given back each time
    assert bound == [x for c in probe.cores for x in (c, allowed)]
    assert os.sched_getaffinity(0) == allowed
    assert 1 <= probe.repeats <= 8 and probe.threads == 1
    # the whole model alone, timed independently, in the same range
    plan = read_plan(tmp_path / "d")
    sess = whole_model_session(plan, zoo.materialize("mobilenetv2", 0))
    feeds = input_arrays(plan, 0)
    sess.run(None, feeds)
    times = []
    for _ in range(9):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    assert 0.6 < ms / np.median(times) < 1.6


def test_quick_calibration_with_deployments_brings_runs_to_its_probe(tmp_path) -> None:
    """quick=true with the MPI deployments: the file keeps the speed probe of its network,
    and the latencies its cut costs were fitted to are the rounds brought to that speed."""
    env_dir = tmp_path / "calibration"
    out = run_module(
        "dse.calibrate",
        "platform=localhost",
        "quick=true",
        env={"DSE_CALIBRATION_DIR": str(env_dir)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads((env_dir / "localhost.json").read_text())
    ref = doc["speed_reference"]["whole_ms"]["alexnet"]
    assert doc["speed_reference"]["threads"] == 1 and ref > 0
    fingerprint = load_net({"name": "alexnet"}).fingerprint
    assert doc["speed_reference"]["fingerprints"] == {"alexnet": fingerprint}
    cuts = doc["provenance"]["cuts"]
    assert len(cuts["measured_ms"]) == 4  # vertical, split, mixed, entry-only
    for measured, rounds, probes in zip(
        cuts["measured_ms"], cuts["rounds_ms"], cuts["rounds_probe_ms"], strict=True
    ):
        by_hand = np.median(np.array(rounds) * ref / np.array(probes))
        assert measured == pytest.approx(by_hand, rel=1e-3)


def test_runs_of_one_deployment_merge_into_one_measurement() -> None:
    from dse.runtime.measure import merge_runs

    def run(med: float, every: list[float], tag: str) -> dict:
        return {"status": "ok", "latency_ms": {"median": med, "all": every}, "ranks": tag}

    merged = merge_runs([run(10, [9, 10, 11], "a"), run(30, [30], "b"), run(20, [19, 21], "c")])
    lat = merged["latency_ms"]
    assert lat["median"] == 20 and lat["rounds_ms"] == [10, 30, 20]
    assert lat["round_spread"] == pytest.approx((30 - 10) / 20)
    assert sorted(lat["all"]) == [9, 10, 11, 19, 21, 30]
    assert lat["p10"] == pytest.approx(np.percentile([9, 10, 11, 19, 21, 30], 10))
    assert merged["ranks"] == "c"  # the other figures: the median run's
    bad = {"status": "failed", "reason": "mpiexec exited with 1"}
    assert merge_runs([run(10, [10], "a"), bad]) == bad


def test_fidelity_error_by_kind_of_mapping() -> None:
    from dse.fidelity import by_kind

    pts = [(11.0, 10.0, "single"), (9.0, 10.0, "single"), (12.0, 10.0, "split")]
    # single: errors +10 % and -10 % (bias 0, MAPE 10); split: +20 %
    assert by_kind(pts) == {
        "single": {"n": 2, "bias_pct": 0.0, "mape_pct": 10.0},
        "split": {"n": 1, "bias_pct": 20.0, "mape_pct": 20.0},
    }


def test_memory_fit_recovers_known_coefficients() -> None:
    """Ranks' peak RSS made by a model with known memory terms (bias, activations, held
    buffers, weights by class, per segment, per layer, loading by class, the bias of a rank
    that runs nothing) on varied mappings: fit_memory finds them again."""
    from dse.calibrate.__main__ import fit_memory

    truth = {
        "bias_mb": 80.0,
        "coefficient": 1.7,
        "weights": {"conv": 2.0, "other": 0.9},
        "per_segment_mb": 0.4,
        "per_layer_mb": 0.3,
        "loading": {"conv": 2.4, "other": 1.3},
        "held": 0.6,
        "empty_mb": 60.0,
    }
    base = coefficients()["cpu"]
    known = dataclasses.replace(
        base,
        memory_bias_mb=truth["bias_mb"],
        memory_coefficient=truth["coefficient"],
        memory_weights=truth["weights"],
        memory_per_segment_mb=truth["per_segment_mb"],
        memory_per_layer_mb=truth["per_layer_mb"],
        memory_loading={"conv": 0.0, "other": 0.0},
        memory_held=truth["held"],
        memory_empty_mb=truth["empty_mb"],
    )
    graph, running_model = _chain_model(Coefficients({"cpu": known}))
    plat = running_model.platform
    runs = []
    # device 0, the entry, only sends the image: runs nothing
    entry_only = whole_on(graph, 2, np.ones(len(graph), int))
    randoms = [
        random_mappings(graph, 2, kind, 1, np.random.default_rng(p))
        for p, kind in enumerate(["single", "vertical", "split", "mixed"] * 3)
    ]
    for p, batch in enumerate([*randoms, entry_only]):
        kind = "entry-only" if p == len(randoms) else "random"
        ev = running_model.evaluate(batch)
        parts = running_model.memory_terms(batch)["parts"][0]
        share = batch.dense(graph)[0]
        w = share[0].T @ running_model._w_class  # [D, class] MB (conv, other)
        ranks = []
        for d in np.flatnonzero(ev.used[0]):
            load = truth["bias_mb"] + w[d] @ [truth["loading"]["conv"], truth["loading"]["other"]]
            if parts[d] == 0:
                load = truth["empty_mb"]
            ranks.append(
                {
                    "device": plat.devices[d].name,
                    "peak_rss_running_mb": float(ev.memory_mb[0, d]),
                    "peak_rss_loading_mb": float(load),
                }
            )
        _, fresh = _chain_model(coefficients())
        runs.append({"net": "chain", "label": kind, "model": fresh, "mapping": batch,
                     "result": {"ranks": ranks}})  # fmt: skip
    fitted, prov = fit_memory(runs)
    assert prov["max_rel_error"] < 1e-3
    for key in ("bias_mb", "coefficient", "per_segment_mb", "per_layer_mb", "held", "empty_mb"):
        assert fitted[key] == pytest.approx(truth[key], rel=1e-2, abs=1e-3), key
    assert fitted["loading"]["conv"] == pytest.approx(truth["loading"]["conv"], rel=1e-2)
