"""What a run tells its user: the coefficients it uses (path, calibrated or shipped, date), why
it stopped before its planned generations (log and summary.json), and where report.html is
(its last line); the notice of a first compilation."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from dse.paths import shown
from dse.results.outputs import stop_reason
from tests.helpers.cli import ROOT, run_module

SMALL = ("progress=false", "+net=alexnet", "algorithm.pop_size=20")


def state(generation: int, evaluations: int, why: str = "generations", cap: int | None = None):
    """A search's end as dse.search.nsga2.run leaves it (its stop_reason: STOP_REASONS)."""
    settings = SimpleNamespace(n_gen=100, max_evaluations=cap, pop_size=1000)
    return SimpleNamespace(
        settings=settings, generation=generation, evaluations=evaluations, stop_reason=why
    )


def test_stop_reason_names_what_ended_the_search_early():
    assert stop_reason(state(100, 90_000), False) is None
    assert stop_reason(state(3, 592, "exhausted"), False) == (
        "no new mapping left to breed after 3 of 100 generations (592 distinct mappings "
        "evaluated of 1000 x 100 planned)"
    )
    assert stop_reason(state(5, 5000, "evaluations", cap=5000), False) == (
        "max_evaluations reached: 5000 of 5000 after 5 of 100 generations"
    )
    interrupted = state(7, 7000, "interrupted")
    assert stop_reason(interrupted, True) == "interrupted after 7 of 100 generations"


def test_a_run_stopped_early_says_why_and_names_its_report_last(tmp_path):
    out = tmp_path / "run"
    args = ("algorithm.n_gen=10", "algorithm.max_evaluations=50", f"hydra.run.dir={out}")
    r = run_module("dse", *SMALL, *args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    summary = json.loads((out / "summary.json").read_text())
    # 20 mappings a generation: 20, 40, then the last 10 of the budget in generation 3
    assert summary["evaluations"] == 50 and summary["generations"] == 3
    why = "max_evaluations reached: 50 of 50 after 3 of 10 generations"
    assert summary["stopped_early"] == why
    assert lines[-2:] == [f"stopped early: {why}", f"report: {shown(out / 'report.html')}"]
    assert "population 20 x 10 generations, at most 50 evaluations, seed 0" in lines[0]
    assert re.fullmatch(
        r"coefficients: conf/platform/jetson_xavier_nx\.json \(uncalibrated: shipped with dse, "
        r"not measured on this hardware; file of \d{4}-\d\d-\d\d \d\d:\d\d\)",
        lines[1],
    ), lines[1]
    log = (out / "__main__.log").read_text()
    assert f"stopped early: {why}" in log and f"report: {shown(out / 'report.html')}" in log
    page = (out / "report.html").read_text()
    assert f"Stopped early: {why}." in page
    assert summary["calibration"] == "uncalibrated" and UNCALIBRATED_WARNING in page
    assert "<td>coefficients</td><td>jetson_xavier_nx.json (uncalibrated)</td>" in page


#: What report.html says of coefficients not calibrated, and of a quick calibration.
UNCALIBRATED_WARNING = (
    "The coefficients were not calibrated on this hardware: figures are the model's estimates "
    "from documented assumptions."
)
QUICK_WARNING = (
    "The coefficients are a quick calibration (dse.calibrate quick=true: a smoke test, few "
    "measurements of one network): figures are not for predictions; calibrate without "
    "quick=true."
)


@pytest.mark.parametrize("quick", [False, True])
def test_a_complete_run_with_calibrated_coefficients(tmp_path, quick):
    """Every output names the coefficients and how they were obtained: a full calibration, or
    a quick one (a smoke test: warned of in report.html, not taken for a calibration)."""
    doc = json.loads((ROOT / "conf" / "platform" / "jetson_xavier_nx.json").read_text())
    doc |= {"calibrated": True, "provenance": {"date": "2026-05-09T12:00:00+00:00"}}
    doc["provenance"] |= {"host": "board7", "quick": quick}
    coefficients = tmp_path / "xavier.json"
    coefficients.write_text(json.dumps(doc))
    out = tmp_path / "run"
    r = run_module(
        "dse",
        *SMALL,
        "algorithm.n_gen=2",
        f"coefficients={coefficients}",
        f"hydra.run.dir={out}",
        env={"TZ": "UTC"},
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    how = "calibrated (quick: a smoke test)" if quick else "calibrated"
    when = f"{how} on board7 2026-05-09 12:00"
    if quick:
        when += "; not for predictions: calibrate without quick=true"
    assert lines[1] == f"coefficients: {shown(coefficients)} ({when})"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_early"] is None
    assert (summary["coefficients"], summary["calibrated"]) == ("xavier.json", True)
    assert summary["calibration"] == how
    page = (out / "report.html").read_text()
    assert f"<td>coefficients</td><td>xavier.json ({how})</td>" in page
    assert UNCALIBRATED_WARNING not in page and (QUICK_WARNING in page) == quick
    assert not any(ln.startswith("stopped early") for ln in lines)
    assert lines[-1] == f"report: {shown(out / 'report.html')}"


def test_a_multirun_names_its_directory_at_the_end(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_module(
        "dse", "--multirun", *SMALL, "algorithm.n_gen=1", "seed=1,2", f"hydra.sweep.dir={sweep}"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == (
        f"multirun: 2 jobs in {shown(sweep)} (compare them: python -m dse.compare {shown(sweep)})"
    )


def test_the_row_splits_notice_only_with_their_kernel_cold(monkeypatch, capsys):
    import dse.search.workflow as entry

    asked = []
    monkeypatch.setattr(entry, "kernel_in_cache", lambda rows: asked.append(rows) or False)
    entry.first_run_notice()  # the kernel without row splits: its notice is the child's
    entry.first_run_notice(spatial=True)
    err = capsys.readouterr().err.splitlines()
    assert asked == [True] and len(err) == 1
    assert err[0].startswith("compiling the model's kernel for row splits once")
    assert err[0].endswith(": a minute or more; later runs start in a few seconds")
    for cached in (True, None):  # compiled already, or numba's cache internals moved
        monkeypatch.setattr(entry, "kernel_in_cache", lambda rows, c=cached: c)
        entry.first_run_notice(spatial=True)
        assert capsys.readouterr().err == ""


def test_a_first_run_says_so_first_and_finds_what_a_later_run_finds(tmp_path):
    """With numba's cache empty, the first line a search writes to stderr is the notice of the
    kernel compiling in a second process (models_analytical.ahead); a later run prints none,
    and both runs find the same front."""
    from models_analytical.ahead import NOTICE

    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    fronts = []
    for run in ("first", "later"):
        out = tmp_path / run
        r = run_module("dse", *SMALL, "algorithm.n_gen=3", f"hydra.run.dir={out}", env=env)
        assert r.returncode == 0, r.stderr
        notices = [line == NOTICE for line in r.stderr.splitlines()]
        assert notices[:1] == [True] if run == "first" else not any(notices), r.stderr
        assert sum(notices) == (run == "first")
        fronts.append((out / "pareto.csv").read_text())
    assert fronts[0] == fronts[1]
