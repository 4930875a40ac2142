"""Phase two after a search: which mappings are measured, and the CSV/plot of a run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.measuring import measure, phase2
from dse.measuring.phase2 import csv_row, latency_lines, plot, write_csv
from dse.measuring.rounds import Rounds
from dse.paths import shown
from dse.platform import load_platform
from dse.results.report import far_off
from models_analytical.model import AnalyticalModel
from tests.helpers.cli import ROOT, run_module
from tests.helpers.figures import pixels, showing
from tests.helpers.nets import zoo_like
from tests.helpers.platforms import coefficients


def test_select_bests_then_spread() -> None:
    F = np.array([[1.0, 9.0], [2.0, 5.0], [3.0, 4.0], [9.0, 1.0], [5.0, 3.0]])
    # bests: row 0 (first objective), row 3 (second); then the farthest from both in the
    # normalised plane: rows 1, 2, 4 are at distances 0.515, 0.673, 0.559 from {0, 3} -> row 2
    picks = phase2.select(F, ["latency", "memory"], 1)
    assert picks == [(0, "best_latency"), (3, "best_memory"), (2, "front_2")]
    assert len(phase2.select(F, ["latency", "memory"], 10)) == 5  # never more than the front
    assert phase2.select(F[:1], ["latency", "memory"], 3) == [(0, "best_latency_memory")]


def row(label: str, predicted: float, measured: float, error: float | None) -> dict:
    """A phase2.csv row of a measured mapping, as csv_row makes it (latency columns)."""
    return {
        "mapping": label,
        "status": "ok",
        "reason": "",
        "latency_predicted_ms": predicted,
        "latency_measured_ms": measured,
        "latency_error_pct": error,
    }


def test_each_mapping_is_one_line_predicted_measured_and_its_error_flagged_past_10_pct():
    failed = {"mapping": "front_3", "status": "failed", "reason": "mpiexec exited with 137"}
    rows = [
        row("best_latency", 55.32, 92.2, -40.0),  # (55.32 - 92.2) / 92.2 = -40 %
        row("best_memory", 10.5, 10.0, 5.0),
        row("best_energy", 11.0, 10.0, 10.0),  # at 10 %: not more than 10 % off
        row("front_2", 0.3101, 0.2, 55.05),
        failed,
        row("front_4", 1.0, 0.0, None),  # measured 0: no error
    ]
    assert latency_lines(rows) == [
        "best_latency: predicted 55.32 ms, measured 92.2 ms, error -40.0 % (more than 10 % off)",
        "best_memory: predicted 10.5 ms, measured 10 ms, error +5.0 %",
        "best_energy: predicted 11 ms, measured 10 ms, error +10.0 %",
        "front_2: predicted 0.3101 ms, measured 0.2 ms, error +55.0 % (more than 10 % off)",
        "front_3: failed (mpiexec exited with 137)",
        "front_4: predicted 1 ms, measured 0 ms, error unknown",
    ]
    assert [far_off(r) for r in rows] == [True, False, False, True, False, False]


@pytest.mark.mpi
def test_a_search_with_phase_two_prints_each_mapping_and_times_the_two_apart(
    tmp_path: Path,
) -> None:
    """`python -m dse phase2.enabled=true` on localhost: after the phase-two line, one line per
    mapping from its phase2.csv row; summary.json times phase two apart from the search, and
    the closing line counts the evaluations against the search's time alone."""
    zoo_like(tmp_path)
    out = tmp_path / "run"
    r = run_module(
        "dse", "+net=onnx", f"net.path={tmp_path / 'zoo_like.onnx'}", "platform=localhost",
        "algorithm.pop_size=10", "algorithm.n_gen=2", "phase2.enabled=true", "phase2.top_k=0",
        "phase2.warmup=0", "phase2.iterations=1", "progress=false", f"hydra.run.dir={out}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["phase2"]
    seconds = summary["phase2_seconds"]
    assert 0 < seconds < summary["wall_seconds"]
    lines = r.stdout.strip().splitlines()
    start = lines.index(
        f"phase two: {len(rows)} of {len(rows)} mappings measured in {seconds:.1f} s -> "
        f"{shown(out / 'phase2.csv')}"
    )
    assert lines[start + 1 : start + 1 + len(rows)] == ["  " + ln for ln in latency_lines(rows)]
    search = summary["wall_seconds"] - seconds
    assert (
        f"{summary['evaluations']} evaluations in {search:.1f} s (then phase two: {seconds:.1f} s)"
    ) in lines[start + 1 + len(rows)]


@pytest.mark.mpi
def test_measure_mappings_writes_rows_and_keeps_going(tmp_path: Path, monkeypatch) -> None:
    """zoo_like all on localhost_cpu0, then a mapping whose run fails: a row each, the first's
    prediction worked out by hand (every op class at 1 MMAC/s, no per-layer cost), its
    measured figures those rank 0 wrote, and the figure shows the measured mapping alone."""
    net = zoo_like(tmp_path)
    platform = load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))
    model = AnalyticalModel(net.graph, platform, coefficients())
    n = len(net.graph)
    batch = from_device_lists(
        net.graph, 2, [[[0]] * n, [[0, 1] if net.graph.splittable[i] else [1] for i in range(n)]]
    )
    real = measure.deploy

    def second_fails(*args, **kwargs):
        if "broken" in str(args[3]):
            raise DseError("mpiexec exited with 137: rank 1 killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "deploy", second_fails)
    settings = measure.Settings(Rounds(1, warmup=1, iterations=2))
    labels = ["one", "broken"]
    dirs = [tmp_path / "run" / "phase2" / label for label in labels]
    measured = measure.measure_mappings(net, model, batch, labels, dirs, settings)
    rows = [csv_row(label, r) for label, r in zip(labels, measured.results, strict=True)]
    write_csv(tmp_path / "run" / "phase2.csv", rows)
    plot(tmp_path / "run" / "phase2.png", rows, "phase two")
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert rows[1]["reason"] == "mpiexec exited with 137: rank 1 killed"
    with open(tmp_path / "run" / "phase2.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["mapping"] for r in table] == ["one", "broken"]
    one, cpu0 = table[0], "localhost_cpu0"
    # One device, nothing sent: the sum of the layers' MACs at 1 MMAC/s. conv_a: 8 x 8 x 8
    # outputs of 4 x 9 MACs (18432); relu_a 512; conv_g 18432 (2 groups of 4 inputs); conv_dw
    # 512 x 9 = 4608; convt_g 512 inputs x 3 outputs x 4 = 6144; convt 512 x 6 x 4 = 12288;
    # add and pool 6 x 16 x 16 = 1536 each; reshape 0; gemm_n 6 x 10 = 60; gemm_t 10 x 12 =
    # 120; matmul 12 x 5 = 60: 63728 MACs, 63.728 ms, at 10 W busy 0.63728 J
    assert float(one["latency_predicted_ms"]) == pytest.approx(63.728, rel=1e-9)
    assert float(one[f"{cpu0}_compute_ms_predicted"]) == pytest.approx(63.728, rel=1e-9)
    assert float(one[f"{cpu0}_energy_j_predicted"]) == pytest.approx(0.63728, rel=1e-9)
    assert float(one[f"{cpu0}_bytes_sent_predicted"]) == 0.0
    assert not any(k.startswith("localhost_cpu1") for k in one)  # it ran no rank
    # measured: what rank 0 wrote into the mapping's measurements.json; errors from the two
    d = tmp_path / "run" / "phase2" / "one"
    measured = json.loads((d / "measurements.json").read_text())
    (rank,) = measured["ranks"]
    assert float(one["latency_measured_ms"]) == measured["latency_ms"]["median"]
    assert float(one[f"{cpu0}_compute_ms_measured"]) == rank["compute_ms"]["median"]
    assert int(one[f"{cpu0}_bytes_sent_measured"]) == rank["bytes_sent"] == 0
    assert float(one[f"{cpu0}_memory_mb_measured"]) == max(
        rank["peak_rss_loading_mb"], rank["peak_rss_running_mb"]
    )
    compute = f"{cpu0}_compute_ms"
    for pred, meas, error in (
        ("latency_predicted_ms", "latency_measured_ms", "latency_error_pct"),
        (f"{compute}_predicted", f"{compute}_measured", f"{compute}_error_pct"),
    ):
        p, m = float(one[pred]), float(one[meas])
        assert float(one[error]) == pytest.approx((p - m) / m * 100, abs=0.01), error
    assert [k for k, v in table[1].items() if v] == ["mapping", "status", "reason"]
    # two panels (latency, memory), 4.4 x 4.0 in each and 0.6 in for the title, at 110 dpi:
    # 968 x 506 pixels; the measured mapping's points in the first colour, no second mapping's
    image = pixels(tmp_path / "run" / "phase2.png")
    assert image.shape == (506, 968, 3)
    assert showing(image, "C0").any() and not showing(image, "C1").any()
    assert (d / "plan.json").is_file()
    assert not list(d.glob("*.onnx*"))  # sub-models dropped once measured (keep=false)


def test_reference_outputs_are_the_whole_model_once_per_file_and_input(
    tmp_path: Path, monkeypatch
) -> None:
    """The equivalence check's expected outputs are onnxruntime's on the whole model; they
    are cached per (model file, input) and a changed file is computed again."""
    import os

    from dse.runtime.deployment.plan import Plan, Port, Reference, input_arrays
    from dse.runtime.launch.deploy import reference_outputs
    from dse.runtime.rank.sessions import session

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
