"""The model counts what the runtime's partitioner writes: segments, sub-model costs (as
calibration's sub-model step reads them) and the buffers a rank holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dse.calibrate.submodels import features
from dse.mapping import random_mappings
from dse.net import load_net
from dse.runtime.compile.partition import partition
from models_analytical.coefficients import Coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers.calibrate import platform_localhost
from tests.helpers.platforms import coefficients


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
    net = load_net({"name": name})
    g = net.graph
    plat = platform_localhost()
    batch = random_mappings(g, 2, kind, 3, np.random.default_rng(7))
    ev = AnalyticalModel(g, plat, coefficients()).evaluate(batch)
    for p in range(len(batch)):
        plan = partition(net, batch.take(p), plat).plan
        got = {r.device_index: len(r.segments) for r in plan.ranks}
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
        for r in dep.plan.ranks:
            d = r.device_index
            mine = [f for f in subs.values() if f["device"] == d]
            assert extra["segment_run_s"][p, d] == pytest.approx(len(r.segments))
            assert extra["segment_in_per_byte_s"][p, d] == pytest.approx(
                sum(f["in_bytes"] for f in mine)
            )
            assert extra["segment_out_per_byte_s"][p, d] == pytest.approx(
                sum(f["out_bytes"] for f in mine)
            )
            assert sum(f["compute_s"] for f in mine) == pytest.approx(busy[p, d])
    assert extra["segment_in_per_byte_s"].max() > 0


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
    for good (dse.runtime.rank.worker.Rank): a buffer per tensor it receives or gathers, and the
    input image on the entry rank."""
    net = load_net({"name": name})
    g = net.graph
    plat = platform_localhost()
    batch = random_mappings(g, 2, kind, 2, np.random.default_rng(3))
    held = AnalyticalModel(g, plat, coefficients()).memory_terms(batch)["held_mb"]
    for p in range(len(batch)):
        plan = partition(net, batch.take(p), plat).plan
        for r in plan.ranks:
            kept = 0
            for s in r.steps:
                if s.op in ("recv", "gather"):
                    shape = s.shape if s.op == "gather" else plan.tensors[s.tensor].shape
                    kept += 4 * int(np.prod(shape))  # float32
            if r.rank == plan.entry_rank:
                kept += sum(4 * int(np.prod(i.shape)) for i in plan.inputs)
            assert held[p, r.device_index] * 1e6 == pytest.approx(kept), (p, r.rank)
    assert held.max() > 0
