"""Phase two after a search: which mappings are measured, and the CSV/plot of a run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from dse.config import Phase2Config
from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.platform import load_platform
from dse.results import phase2
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers.cli import ROOT
from tests.helpers.nets import zoo_like


def test_select_bests_then_spread() -> None:
    F = np.array([[1.0, 9.0], [2.0, 5.0], [3.0, 4.0], [9.0, 1.0], [5.0, 3.0]])
    # bests: row 0 (first objective), row 3 (second); then the farthest from both in the
    # normalised plane: rows 1, 2, 4 are at distances 0.515, 0.673, 0.559 from {0, 3} -> row 2
    picks = phase2.select(F, ["latency", "memory"], 1)
    assert picks == [(0, "best_latency"), (3, "best_memory"), (2, "front_2")]
    assert len(phase2.select(F, ["latency", "memory"], 10)) == 5  # never more than the front
    assert phase2.select(F[:1], ["latency", "memory"], 3) == [(0, "best_latency_memory")]


@pytest.mark.mpi
def test_measure_mappings_writes_rows_and_keeps_going(tmp_path: Path, monkeypatch) -> None:
    net = zoo_like(tmp_path)
    platform = load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))
    model = AnalyticalModel(
        net.graph, platform, load_coefficients(ROOT / "conf/platform/localhost.json")
    )
    n = len(net.graph)
    batch = from_device_lists(
        net.graph, 2, [[[0]] * n, [[0, 1] if net.graph.splittable[i] else [1] for i in range(n)]]
    )
    real = phase2.deploy_and_measure

    def second_fails(*args, **kwargs):
        if "broken" in str(args[4]):
            raise DseError("mpiexec exited with 137: rank 1 killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(phase2, "deploy_and_measure", second_fails)
    settings = Phase2Config(warmup=1, iterations=2)
    rows = phase2.measure_mappings(
        tmp_path / "run", net, platform, model, batch, ["one", "broken"], settings
    )
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert rows[1]["reason"] == "mpiexec exited with 137: rank 1 killed"
    with open(tmp_path / "run" / "phase2.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["mapping"] for r in table] == ["one", "broken"]
    pred = float(table[0]["latency_predicted_ms"])
    assert pred == pytest.approx(model.evaluate(batch.take(0)).latency_s[0] * 1e3, rel=1e-3)
    measured = float(table[0]["latency_measured_ms"])
    assert float(table[0]["latency_error_pct"]) == pytest.approx(
        (pred - measured) / measured * 100, abs=0.01
    )
    assert (tmp_path / "run" / "phase2.png").stat().st_size > 0
    one = tmp_path / "run" / "phase2" / "one"
    assert (one / "measurements.json").is_file() and (one / "plan.json").is_file()
    assert not list(one.glob("*.onnx*"))  # sub-models dropped once measured (keep=false)


def test_reference_outputs_are_the_whole_model_once_per_file_and_input(
    tmp_path: Path, monkeypatch
) -> None:
    """The equivalence check's expected outputs are onnxruntime's on the whole model; they
    are cached per (model file, input) and a changed file is computed again."""
    import os

    from dse.runtime.equivalence import reference_outputs
    from dse.runtime.plan import Plan, Port, Reference, input_arrays
    from dse.runtime.sessions import session

    monkeypatch.setenv("DSE_CACHE", str(tmp_path / "cache"))
    net = zoo_like(tmp_path)
    path = Path(net.path)
    x = [Port("x", (1, 4, 8, 8), "float32")]
    plan = Plan("zoo_like", "f", "m", "p", 3, x, [], 0, {}, [], Reference(str(path)))
    names = ["m", "s"]
    want = session(str(path)).run(names, input_arrays(plan, 3))
    got = reference_outputs(plan, path, names)
    (cached,) = (tmp_path / "cache" / "reference").glob("*.npz")
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    with np.load(cached) as z:  # the cache holds the values; the second call reads them
        for i, b in enumerate(want):
            np.testing.assert_array_equal(z[f"o{i}"], b)
    # the second call reads the cache, not the model: planted zeros come back
    np.savez(cached, o0=np.zeros_like(want[0]), o1=np.zeros_like(want[1]))
    assert all(not a.any() for a in reference_outputs(plan, path, names))
    assert len(list(cached.parent.glob("*.npz"))) == 1
    os.utime(path, ns=(0, 0))  # the file changed: another key
    reference_outputs(plan, path, names)
    assert len(list(cached.parent.glob("*.npz"))) == 2
