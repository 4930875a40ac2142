"""Calibration's fits recover the coefficients that made synthetic measurements."""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from dse.calibrate.bands import band_rows
from dse.calibrate.deployments import SPLIT_SAME_HOST, shared_host
from dse.mapping import random_mappings, remap
from dse.mapping import whole as whole_on
from dse.platform import Device, Link, Platform
from models_analytical.calibration import (
    MEMORY_COLUMNS,
    MeasuredRun,
    RankMeasurement,
    SubModelTiming,
    fit_cuts,
    fit_memory,
    fit_nonnegative,
    fit_submodel_costs,
    memory_rows,
)
from models_analytical.coefficients import Coefficients, Memory
from models_analytical.layer_costs import PART_FIXED_MAX
from models_analytical.layer_fits import (
    fit_channel_block,
    fit_part_fixed,
    fit_regression,
    fit_row_fixed,
)
from tests.helpers.calibrate import board_pair_model, chain_model, platform_localhost
from tests.helpers.platforms import coefficients


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
        np.testing.assert_allclose(fit.per_family[fam], c, rtol=1e-3, atol=1e-14)


def test_memory_bound_families_share_a_row_for_those_without_their_own() -> None:
    """Layers moving bytes (arith, activation) fit a ``memory`` row together, beside their own;
    a family with no row of its own takes it (resize), a fused layer none costs nothing, and a
    convolution falls back to ``any``."""
    from models_analytical.layer_costs import MEMORY_ROW, regression_row

    fams = ["arith"] * 4 + ["activation"] * 4 + ["conv"] * 4
    bytes_moved = np.array([1e4, 2e4, 4e4, 8e4] * 3)
    terms = np.array([[1.0, 0.0, b, 0.0] for b in bytes_moved])
    terms[8:, 1] = [1e6, 2e6, 4e6, 8e6]  # the convs' MACs
    secs = np.concatenate([1e-6 + 1e-10 * bytes_moved[:8], 1e-11 * terms[8:, 1]])
    fit = fit_regression(fams, terms, secs)
    np.testing.assert_allclose(fit.per_family[MEMORY_ROW], [1e-6, 0.0, 1e-10, 0.0], atol=1e-15)
    cpu = dataclasses.replace(coefficients()["cpu"], regression=fit.per_family)
    assert regression_row(cpu, "resize") == fit.per_family[MEMORY_ROW]
    assert regression_row(cpu, "fused") == (0.0, 0.0, 0.0, 0.0)
    assert regression_row(cpu, "conv_1x1") == fit.per_family["any"]


def test_a_memory_bound_layer_is_costed_by_the_bytes_it_moves() -> None:
    """An Add of a 1x8x4x4 activation and a constant of the same shape: it reads 2 x 512 bytes
    and writes 512, with no MAC term; a Conv keeps its MACs and weight bytes apart."""
    from onnx import helper

    from dse.net.build import build_graph
    from models_analytical.layer_costs import regression_terms
    from tests.helpers.onnx_factory import model, weight

    m = model(
        [helper.make_node("Add", ["x", "c"], ["y"], name="add")],
        {"x": [1, 8, 4, 4]}, ["y"], [weight("c", (1, 8, 4, 4))],
    )  # fmt: skip
    (add,) = build_graph(m, "add").layers
    assert list(regression_terms(add)) == [1.0, 0.0, 3 * 512.0, 0.0]


def test_a_family_of_one_mac_count_gets_no_constant() -> None:
    """ResNet-50's 3x3 convolutions all have 115.6 M MACs, AlexNet's conv3 149.5 M: times of
    20 ps per MAC with a few percent of noise. Fitted with a constant, the line through them
    takes a third of the cheapest layer's time as a constant (checked below); the fit keeps
    none, and its time
    per MAC is the relative least-squares slope through the origin worked out by hand,
    sum(m / t) / sum(m^2 / t^2). A family whose MACs span 4x keeps its constant (the test
    above)."""
    macs = np.array([115.6e6] * 5 + [149.5e6])
    noise = np.array([1.03, 0.98, 1.01, 0.97, 1.02, 0.92])
    secs = 2e-11 * macs * noise
    terms = np.column_stack([np.ones(6), macs, np.zeros(6), np.zeros(6)])
    with_constant = fit_nonnegative(terms / [1, 1e9, 1, 1], secs)
    assert with_constant[0] > 0.3 * secs.min()  # the degenerate fit the rule avoids
    fit = fit_regression(["conv_winograd"] * 6, terms, secs).per_family["conv_winograd"]
    slope = np.sum(macs / secs) / np.sum(macs**2 / secs**2)
    assert fit[0] == 0.0 and fit[2] == 0.0 and fit[3] == 0.0
    assert fit[1] == pytest.approx(slope, rel=1e-6)
    assert fit[1] == pytest.approx(2e-11, rel=0.03)


def test_channel_block_recovered_from_synthetic_parts() -> None:
    channels = np.array([4, 8, 12, 16, 24, 32, 40, 48, 64] * 2, dtype=float)
    case = np.repeat([0, 1], 9)
    scale = np.where(case == 0, 1e-5, 3e-5)
    seconds = 2e-4 + scale * np.ceil(channels / 8) * 8
    assert fit_channel_block(channels, case, seconds).block == 8
    # without blocks the smallest block (1) is kept
    assert fit_channel_block(channels, case, 2e-4 + scale * channels).block == 1


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
    fit = fit_part_fixed(rows)
    per_layer, per_family, err = fit.per_layer, fit.per_family, fit.median_rel_error
    for i, f in enumerate(fs):
        assert per_layer[f"k{i}"] == pytest.approx(f, rel=1e-6)
    assert per_layer["o0"] == pytest.approx(0.2, rel=1e-6)
    assert per_layer["o1"] == pytest.approx(0.9)  # 0.99 capped
    sw = np.sqrt(wholes)
    beta = np.linalg.lstsq((sw / np.array(fulls))[:, None], sw * np.array(fs), rcond=None)[0][0]
    assert per_family == {"conv": pytest.approx(beta, rel=1e-9)}
    assert err == pytest.approx(0.0, abs=1e-9)


def bands(key: str, family: str, full: int, f: float, whole: float = 1e-3) -> list[dict]:
    """A layer's rows as dse.calibrate.bands times them: its bands of band_rows(full), each
    paying the share ``f`` of the whole time and its share of the rest."""
    return [
        {"key": key, "family": family, "rows": r, "full": full,
         "seconds": whole * (f + (1 - f) * r / full)}
        for r in band_rows(full)
    ]  # fmt: skip


def test_row_fixed_shares_recovered_from_synthetic_bands() -> None:
    """Layers timed as bands with known fixed shares: each layer's share comes back exactly;
    a family's share is the median of its layers' (0.1, 0.2, 0.3, 0.35: 0.25); a share over
    PART_FIXED_MAX is clipped to it, a line that is negative at 0 rows to 0 (the median of 0.9,
    0 and 0.5 is 0.5); a family of two layers gets no share; a layer without its whole time,
    or with one row count, is left out."""
    rows = []
    for i, (full, f) in enumerate(zip((56, 28, 14, 7), (0.1, 0.2, 0.3, 0.35), strict=True)):
        rows += bands(f"w{i}", "conv_winograd", full, f, whole=1e-3 * (i + 1))
    rows += bands("c0", "conv", 54, 0.2) + bands("c1", "conv", 27, 0.4)
    rows += bands("g0", "conv_grouped", 13, 0.95) + bands("g1", "conv_grouped", 13, -0.1)
    rows += bands("g2", "conv_grouped", 27, 0.5)
    rows += [r for r in bands("no_whole", "conv", 28, 0.3) if r["rows"] < 28]
    rows += [r for r in bands("one_count", "conv", 28, 0.3) if r["rows"] == 28]
    fit = fit_row_fixed(rows)
    expected = {"w0": 0.1, "w1": 0.2, "w2": 0.3, "w3": 0.35, "c0": 0.2, "c1": 0.4}
    expected |= {"g0": PART_FIXED_MAX, "g1": 0.0, "g2": 0.5}
    assert fit.per_layer == {k: pytest.approx(v, abs=1e-9) for k, v in expected.items()}
    assert fit.per_family == {
        "conv_grouped": pytest.approx(0.5, abs=1e-9),
        "conv_winograd": pytest.approx(0.25, abs=1e-9),
    }
    assert fit.median_rel_error == pytest.approx(0.0, abs=1e-9)
    prov = fit.provenance
    assert prov["layers"] == 9
    assert prov["layers_per_family"] == {"conv": 2, "conv_grouped": 3, "conv_winograd": 4}
    k = fit.apply(coefficients()["cpu"])
    assert k.row_fixed == fit.per_family and k.part_fixed == coefficients()["cpu"].part_fixed
    # with min_layers 2, conv (0.2, 0.4) gets the median of two, 0.3
    assert fit_row_fixed(rows, min_layers=2).per_family["conv"] == pytest.approx(0.3)


def test_row_fixed_shares_hold_under_noise() -> None:
    """Seven 3x3 convolutions whose bands pay 15 % of the layer, timed with 1 % noise: each
    layer's share within 0.03, the family's within 0.02 of 0.15; an eighth layer whose
    smallest band was timed 3x too slow (a slow spell) has a share far off, and the family's
    median does not follow it (a mean would: 0.2 and more)."""
    rng = np.random.default_rng(3)
    rows = []
    for i, full in enumerate((224, 112, 56, 56, 28, 14, 7)):
        for r in bands(f"k{i}", "conv_winograd", full, 0.15, whole=1e-4 * full):
            rows.append({**r, "seconds": r["seconds"] * (1 + 0.01 * rng.standard_normal())})
    slow = bands("slow", "conv_winograd", 28, 0.15)
    slow[0]["seconds"] *= 3.0
    fit = fit_row_fixed(rows + slow)
    clean = {k: v for k, v in fit.per_layer.items() if k != "slow"}
    assert len(clean) == 7
    assert all(abs(f - 0.15) < 0.03 for f in clean.values()), clean
    assert fit.per_layer["slow"] > 0.35
    assert fit.per_family["conv_winograd"] == pytest.approx(0.15, abs=0.02)
    assert np.mean(list(fit.per_layer.values())) > 0.17  # what a mean would have made of it
    assert 0 < fit.median_rel_error < 0.02


def fake_run(label: str, busy: list[float], side: list[float], measured: list[float]):
    """A measured run whose model gives each device ``busy`` (s) of work at factor 1, of which
    ``side`` runs side by side (charged by the factor: busy + (factor - 1) x side)."""

    def model(factor: float) -> SimpleNamespace:
        ev = SimpleNamespace(busy_s=np.array([busy]) + (factor - 1) * np.array([side]))
        return SimpleNamespace(
            evaluate=lambda mapping: ev, with_shared_host_factor=lambda f: model(f)
        )

    ranks = tuple(RankMeasurement(d, ms / 1e3, None, None) for d, ms in enumerate(measured))
    return MeasuredRun("n", label, model(1.0), None, 0.0, ranks)


def test_shared_host_factor_fitted_on_the_split_against_the_one_device_run() -> None:
    """The one-device run computes 1.02x the model's work. Two devices of one host: the split's
    ranks computed 1.02 x (30 + 0.2 x 20) and 1.02 x (20 + 0.2 x 20) ms, where 20 ms of each
    ran side by side: a factor of 1.2 each; a second split's first rank 1.1 (its second has
    1 ms side by side: left out). The median, 1.2; vertical and mixed runs are not read."""
    plat = platform_localhost()
    single = fake_run("single", [0.050, 0.0], [0.0, 0.0], [51.0, 0.0])
    runs = [
        single,
        fake_run("split", [0.030, 0.020], [0.020, 0.020], [1.02 * 34, 1.02 * 24]),
        fake_run("split", [0.030, 0.020], [0.030, 0.001], [1.02 * 33, 40.0]),
        fake_run("mixed", [0.030, 0.020], [0.020, 0.020], [99.0, 99.0]),
    ]
    fit = shared_host(runs, plat)
    assert fit.factor == pytest.approx(1.2)
    assert fit.provenance["ranks"] == 3
    assert fit.provenance["runs"] == "split"
    assert fit.provenance["p10_p90"] == pytest.approx([1.12, 1.2])
    # ranks faster than the one-device run's speed: the factor stays 1
    faster = [single, fake_run("split", [0.030, 0.020], [0.020, 0.020], [29.0, 19.0])]
    assert shared_host(faster, plat).factor == 1.0
    # a one-device run under 2 ms of work gives no reference: nothing fitted, factor 1
    tiny = [fake_run("single", [0.001, 0.0], [0.0, 0.0], [1.0, 0.0]), runs[1]]
    fit = shared_host(tiny, plat)
    assert (fit.factor, fit.provenance["ranks"], fit.provenance["median_per_network"]) == (
        1.0,
        0,
        {},
    )


def test_shared_host_factor_leaves_out_a_rank_without_compute() -> None:
    """A rank that read no compute gives no estimate and does not fail the fit: the split of
    the test above with its first rank's compute unread leaves its second rank's 1.2 and the
    other split's 1.1 (1.02 x 33 ms against 30 ms of work, 30 of them side by side): their
    median 1.15, over 2 ranks."""
    plat = platform_localhost()
    single = fake_run("single", [0.050, 0.0], [0.0, 0.0], [51.0, 0.0])
    split = fake_run("split", [0.030, 0.020], [0.020, 0.020], [1.02 * 34, 1.02 * 24])
    first = dataclasses.replace(split.ranks[0], compute_s=None)
    unread = dataclasses.replace(split, ranks=(first, split.ranks[1]))
    other = fake_run("split", [0.030, 0.020], [0.030, 0.001], [1.02 * 33, 40.0])
    fit = shared_host([single, unread, other], plat)
    assert fit.provenance["ranks"] == 2
    assert fit.factor == pytest.approx(1.15)


def test_shared_host_factor_from_the_pairs_split_where_the_cuts_cross_hosts() -> None:
    """edge3-like: device 0 alone on its host, devices 1 and 2 (types a, b) on another; the
    cuts cross hosts, so the factor comes from the split on the pair (each rank against the
    one-device run of its own type: 1.0x and 1.1x the model), and without that run it is 1."""
    devices = (
        Device("h0_cpu", "h0", "cpu", 1, 1e4, "c"),
        Device("h1_cpu0", "h1", "cpu", 1, 1e4, "a"),
        Device("h1_cpu1", "h1", "cpu", 1, 1e4, "b"),
    )
    plat = Platform("t", devices, {"network": Link(0.0, 1e9)}, entry=0)
    runs = [
        fake_run("single:a", [0.0, 0.040, 0.0], [0.0] * 3, [0.0, 40.0, 0.0]),
        fake_run("single:b", [0.0, 0.0, 0.060], [0.0] * 3, [0.0, 0.0, 66.0]),
        fake_run("split", [0.020, 0.020, 0.0], [0.0] * 3, [25.0, 25.0, 0.0]),
        fake_run(
            SPLIT_SAME_HOST,
            [0.0, 0.030, 0.020],
            [0.0, 0.030, 0.020],
            [0.0, 1.25 * 30, 1.1 * 1.25 * 20],
        ),  # fmt: skip
    ]
    fit = shared_host(runs, plat)
    assert fit.factor == pytest.approx(1.25)
    assert fit.provenance["ranks"] == 2
    assert fit.provenance["runs"] == SPLIT_SAME_HOST
    without = shared_host(runs[:3], plat)
    assert (without.factor, without.provenance["why"]) == (
        1.0,
        "no split over two devices of one host ran",
    )


def test_sub_model_costs_recovered_from_synthetic_timings() -> None:
    """fit_submodel_costs recovers the run, per-byte and split costs that made synthetic
    sub-model timings, at two process speeds."""

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
            SubModelTiming(
                device=i % 2,
                compute_s=compute,
                split_s=split,
                in_bytes=inb,
                out_bytes=outb,
                alone_s=alone,
                speed=speed,
                net="synthetic",
                mapping=i // 20,
            )
        )
    fit = fit_submodel_costs(samples)
    got, prov = dataclasses.asdict(fit), fit.provenance
    assert got["segment_run_s"] == pytest.approx(truth["run"], rel=1e-6)
    assert got["segment_in_per_byte_s"] == pytest.approx(truth["in"], rel=1e-6)
    assert got["segment_out_per_byte_s"] == pytest.approx(truth["out"], rel=1e-6)
    assert got["split_work_factor"] == pytest.approx(truth["split"], rel=1e-6)
    assert prov["median_abs_error_after"] < 1e-6 < prov["median_abs_error_before"]


def test_memory_fit_recovers_known_coefficients() -> None:
    """Ranks' peak RSS made by a model with known memory terms (bias, activations, held
    buffers, weights by class, per segment, per layer, loading by class, the bias of a rank
    that runs nothing) on varied mappings: fit_memory finds them again."""
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
        base, memory=Memory(**{**truth, "loading": {"conv": 0.0, "other": 0.0}})
    )
    graph, running_model = chain_model(Coefficients({"cpu": known}))
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
            ranks.append(RankMeasurement(int(d), None, float(ev.memory_mb[0, d]), float(load)))
        _, fresh = chain_model(coefficients())
        runs.append(MeasuredRun("chain", kind, fresh, batch, 0.0, tuple(ranks)))
    fit = fit_memory(runs)
    fitted, prov = dataclasses.asdict(fit), fit.provenance
    assert prov["max_rel_error"] < 1e-3
    for key in ("bias_mb", "coefficient", "per_segment_mb", "per_layer_mb", "held", "empty_mb"):
        assert fitted[key] == pytest.approx(truth[key], rel=1e-2, abs=1e-3), key
    assert fitted["loading"]["conv"] == pytest.approx(truth["loading"]["conv"], rel=1e-2)


def test_memory_rows_name_the_model_terms_by_hand() -> None:
    """One mapping of the chain on device 0 (the entry) with a rank that reads 500 / 400 MB:
    a running row with the liveness peak less the weights as activations, the weights (all
    conv), one segment, every layer, the held input image, and a loading row with the
    weights; each named, every other column 0; the rank's two names."""
    graph, m = chain_model(coefficients())
    batch = whole_on(graph, 2, np.zeros(len(graph), int))
    run = MeasuredRun("chain", "single", m, batch, 1.0, (RankMeasurement(0, 0.1, 500.0, 400.0),))
    rows, target, names = memory_rows([run])
    w = graph.weight_bytes.sum() / 1e6
    image = sum(t.nbytes for t in graph.inputs) / 1e6
    peak = m.memory_terms(batch)["peak_mb"][0, 0]
    assert set(rows[0]) | set(rows[1]) <= set(MEMORY_COLUMNS)
    assert rows[0] == {
        "bias": 1.0,
        "empty": 0.0,
        "activations": pytest.approx(peak - w),
        "weights_conv": pytest.approx(w),
        "weights_other": 0.0,
        "segments": 1,
        "layers": len(graph),
        "held": pytest.approx(image),
    }
    assert rows[1] == {
        "bias": 1.0,
        "empty": 0.0,
        "loading_conv": pytest.approx(w),
        "loading_other": 0.0,
    }
    assert target == [500.0, 400.0]
    assert names == ["chain/single/h0_cpu/run", "chain/single/h0_cpu/load"]


def test_memory_rows_leave_out_a_rank_missing_either_peak() -> None:
    """A rank that read its running peak but not its loading one (or the reverse) gives no
    row: both of its rows or neither, never a target of None."""
    graph, m = chain_model(coefficients())
    batch = whole_on(graph, 2, np.zeros(len(graph), int))
    for running, loading in ((500.0, None), (None, 400.0)):
        rank = RankMeasurement(0, 0.1, running, loading)
        run = MeasuredRun("chain", "single", m, batch, 1.0, (rank,))
        assert memory_rows([run]) == ([], [], [])


def test_cut_costs_recovered_from_synthetic_latencies() -> None:
    """Latencies of cut mappings made by a model with known cut costs (0.3 ms per tensor
    crossing devices, 2 ns per byte): fit_cuts, from a model without them, finds them again,
    and its predicted latencies are the measured ones."""
    truth = {"fixed": 3e-4, "per_byte": 2e-9}
    cpu = dataclasses.replace(
        coefficients()["cpu"],
        transfer_fixed_s=truth["fixed"],
        transfer_per_byte_s=truth["per_byte"],
    )
    graph, made = chain_model(Coefficients({"cpu": cpu}))
    _, fresh = chain_model(coefficients())
    runs = []
    for p, kind in enumerate(["vertical", "split", "mixed"] * 2):
        batch = random_mappings(graph, 2, kind, 1, np.random.default_rng(p))
        latency_ms = float(made.evaluate(batch).latency_s[0]) * 1e3
        runs.append(MeasuredRun("chain", f"{kind}{p}", fresh, batch, latency_ms, ()))
    fit = fit_cuts(runs)
    assert fit.fixed_s == pytest.approx(truth["fixed"], rel=1e-2)
    assert fit.per_byte_s == pytest.approx(truth["per_byte"], rel=1e-2)
    np.testing.assert_allclose(
        fit.provenance["predicted_ms"], fit.provenance["measured_ms"], rtol=1e-3, atol=1e-3
    )
    assert fit.provenance["mappings"][0] == "chain/vertical0"
    applied = fit.apply(coefficients()["cpu"])
    assert (applied.transfer_fixed_s, applied.transfer_per_byte_s) == (fit.fixed_s, fit.per_byte_s)
    # every device on a host of its own: no crossing within a host, whose cost takes the other's
    assert fit.provenance["per_byte_crossed"] == {"between_hosts": True, "same_host": False}
    assert applied.transfer_per_byte_same_host_s == fit.per_byte_s


def test_cut_costs_per_byte_between_boards_and_within_one_recovered() -> None:
    """Cut mappings over two boards (h0_cpu and h1_cpu0) and within board h1 (h1_cpu0 and
    h1_cpu1), their latencies made with 0.3 ms per tensor, 2 ns per byte between boards and
    0.2 ns within one: fit_cuts, from a model without cut costs, finds all three again."""
    truth = (3e-4, 2e-9, 2e-10)
    graph, made = board_pair_model(truth[1], truth[2])
    made = made.with_transfer_costs(*truth)
    _, fresh = board_pair_model(0.0, None)
    runs = []
    for p, (kind, pair) in enumerate(
        itertools.product(["vertical", "split", "mixed"], [(0, 1), (1, 2)])
    ):
        batch = remap(random_mappings(graph, 2, kind, 1, np.random.default_rng(p)), list(pair), 3)
        latency_ms = float(made.evaluate(batch).latency_s[0]) * 1e3
        runs.append(MeasuredRun("chain", f"{kind}{pair}", fresh, batch, latency_ms, ()))
    fit = fit_cuts(runs)
    assert fit.provenance["per_byte_crossed"] == {"between_hosts": True, "same_host": True}
    assert (fit.fixed_s, fit.per_byte_s, fit.per_byte_same_host_s) == pytest.approx(truth, rel=2e-2)
