"""Calibration's anchoring of a type's layer times to its one-device runs under the runtime
(dse.calibrate.compute.anchor_to_runtime), against figures worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.calibrate.compute import (
    ProfileSamples,
    TypeCompute,
    anchor_to_runtime,
    steady_regressions,
)
from dse.mapping import from_device_lists
from models_analytical.calibration import MeasuredRun
from models_analytical.coefficients import Coefficients, TypeCoefficients
from models_analytical.layer_costs import family, layer_key, regression_terms
from models_analytical.model import AnalyticalModel
from tests.helpers.graphs import relu_chain
from tests.helpers.platforms import coefficients, platform


def test_a_run_off_the_entry_device_is_anchored_without_the_images_transfer():
    """Two Relu layers profiled at 2 s each (4 s whole) on a type whose device (h1) is not the
    entry device: its one-device run receives the image (8 MB over 8 MB/s and 0.5 s: 1.5 s)
    before it computes. Measured 9.5 s, of which the model puts 1.5 s in the transfer: the
    layers took 8 s, twice their profile, and each is anchored at 4 s. (Counting the transfer
    as work made the factor 9.5 / 4 = 2.375.)"""
    g = relu_chain(2_000_000, 2)
    plat = platform(n=2, bw=8e6, latency=0.5)
    base = replace(coefficients()["cpu"], layer_s={layer_key(layer): 2.0 for layer in g})
    model = AnalyticalModel(g, plat, Coefficients({"cpu": base}))
    alone = from_device_lists(g, len(plat), [[[1], [1]]])
    ev = model.evaluate(alone)
    assert ev.latency_s[0] == pytest.approx(1.5 + 4.0)  # the image's transfer, then the layers
    samples = ProfileSamples(
        net=("chain", "chain"),
        family=tuple(family(layer) for layer in g),
        terms=np.stack([regression_terms(layer) for layer in g]),
        seconds=np.array([2.0, 2.0]),
    )
    compute = TypeCompute(base, {}, samples, {"chain": 4000.0}, here=True)
    run = MeasuredRun("chain", "single", model, alone, 9500.0, ())
    anchored, factors = anchor_to_runtime(base, compute, [run])
    assert factors == {"chain": 2.0}
    assert [anchored.layer_s[layer_key(layer)] for layer in g] == pytest.approx([4.0, 4.0])
    again = AnalyticalModel(g, plat, Coefficients({"cpu": anchored})).evaluate(alone)
    assert again.latency_s[0] == pytest.approx(9.5)  # the anchored model predicts the run


def test_a_time_sliced_types_regression_is_the_steady_types_scaled_by_their_ratio():
    """Three types, each profiling twelve layer keys: "cpu" steady at 1-12 ms, "share" (time
    sliced) at 2.5 times those, "noisy" (time sliced) at 4 times. Each sliced type's
    regression becomes "cpu"'s times its ratio (2.5 and 4, by hand): "share" is not a steady
    type to "noisy". "cpu" keeps its own; so does a sliced type with no steady type to
    compare (fewer than SCALE_MIN_COMMON keys in common)."""
    keys = [f"k{i}" for i in range(12)]
    base = coefficients()["cpu"]
    reg = {"conv": [1e-4, 2e-9, 0.0, 3e-10], "any": [0.0, 1e-9, 1e-10, 0.0]}

    def typed(factor: float, own: dict, n: int = 12) -> TypeCoefficients:
        layer_s = {k: 1e-3 * (i + 1) * factor for i, k in enumerate(keys[:n])}
        return replace(base, layer_s=layer_s, regression=own)

    own = {"conv": [0.0, 9e-9, 0.0, 0.0]}
    c = Coefficients({"cpu": typed(1, reg), "share": typed(2.5, own), "noisy": typed(4, own)})
    out, prov = steady_regressions(c, ["share", "noisy"])
    assert out["cpu"].regression == reg
    for name, ratio in (("share", 2.5), ("noisy", 4.0)):
        assert prov[name] == {"from": "cpu", "ratio": ratio}
        for fam, coef in reg.items():
            assert out[name].regression[fam] == pytest.approx([x * ratio for x in coef])
    few = Coefficients({"cpu": typed(1, reg), "share": typed(2.5, own, n=9)})
    out, prov = steady_regressions(few, ["share"])
    assert out["share"].regression == own and prov == {}
