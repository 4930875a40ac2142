"""The run's figures and report as a reader sees them: one colour and marker per best mapping in
every panel, no empty panel, plain numbers on log axes, the front's table rounded."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from dse.results import report
from dse.results.plots import pareto_figure, plain_log_ticks

NAMES = ["latency", "memory", "energy", "bytes", "period"]


def front(k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(k)
    f = rng.random((30, k)) * np.array([100, 500, 2, 30, 80])[:k] + 1
    feasible = np.ones(30, dtype=bool)
    feasible[:2] = False
    return f, feasible


def bests_drawn(ax) -> dict[str, tuple[tuple[float, ...], str]]:  # noqa: ANN001
    """label -> (RGBA, marker) of every 'best ...' artist of a panel (scatter or line)."""
    out = {}
    for c in ax.collections:
        if c.get_label().startswith("best "):
            out[c.get_label()] = (tuple(c.get_facecolor()[0]), None)
    for line in ax.lines:
        if line.get_label().startswith("best "):
            out[line.get_label()] = (to_rgba(line.get_color()), line.get_marker())
    return out


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_each_best_has_one_colour_everywhere_and_no_panel_is_empty(k):
    f, feasible = front(k)
    fig = pareto_figure(f, feasible, NAMES[:k])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    pairs = k * (k - 1) // 2
    assert len(shown) == pairs + (1 if k >= 3 else 0)  # every panel drawn holds a plot
    for ax in shown:
        assert ax.collections or ax.lines, ax.get_title()
    colours: dict[str, set] = {}
    for ax in shown:
        drawn = bests_drawn(ax)
        assert set(drawn) == {f"best {n}" for n in NAMES[:k]}
        for label, (rgba, _) in drawn.items():
            colours.setdefault(label, set()).add(rgba)
    assert all(len(c) == 1 for c in colours.values()), colours  # the same in every panel
    assert len({next(iter(c)) for c in colours.values()}) == k  # and a colour each
    front_colour = to_rgba("C0")
    assert front_colour not in {next(iter(c)) for c in colours.values()}


def test_log_axes_read_20_50_100():
    fig = Figure()
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(12, 200)
    ax.set_ylim(150, 900)
    plain_log_ticks(ax)
    x = ax.xaxis.get_major_locator()()
    x_shown = [ax.xaxis.get_major_formatter()(v, 0) for v in x if 12 <= v <= 200]
    assert x_shown == ["20", "50", "100", "200"]
    y = ax.yaxis.get_major_locator()()
    y_shown = [ax.yaxis.get_major_formatter()(v, 0) for v in y if 150 <= v <= 900]
    assert y_shown == ["200", "300", "500"]


def test_report_tables_round_each_objective_to_its_unit():
    summary = {
        "net": "vgg16",
        "platform": "p",
        "genes": 32,
        "search_space_log10": 39.37,
        "objectives": ["latency", "memory", "energy"],
        "generations": 3,
        "evaluations": 60,
        "search_seconds": 1.0,
        "wall_seconds": 2.0,
        "hypervolume": 1.0,
        "feasible": True,
        "config": {},
    }
    values = {"latency": 71.231837, "memory": 669.777024, "energy": 0.551688}
    row = {
        "point": 0,
        "latency_ms": 71.231837,
        "memory_MB": 669.777024,
        "energy_J": 0.551688,
        "feasible": True,
        "devices_used": 2,
        "split_layers": 0,
        "sent_MB": 0.602112,
        "same_cost_mappings": 1,
    }
    best = {"latency": {"values": values, "table": "| layer |\n|---|\n| conv1 |\n"}}
    page = report.render(summary, "t", [row], best)
    cells = ["<td>71.23</td>", "<td>669.8</td>", "<td>0.552</td>", "<td>0.60</td>"]
    for cell in cells:
        assert cell in page, cell
    assert "71.2318" not in page and "669.777" not in page


def test_the_report_flags_phase_two_mappings_more_than_10_pct_off():
    """A warning at the top names the mappings measured more than 10 % off their predicted
    latency, and their rows in the phase-two table say so; a failed one is not counted."""
    summary = {
        "net": "vgg16",
        "platform": "p",
        "genes": 32,
        "search_space_log10": 39.37,
        "objectives": ["latency"],
        "generations": 3,
        "evaluations": 592,
        "search_seconds": 12.5,
        "phase2_seconds": 19.6,
        "wall_seconds": 32.1,
        "hypervolume": 1.0,
        "feasible": True,
        "config": {},
        "phase2": [
            {"mapping": "best_latency", "status": "ok", "reason": "",
             "latency_predicted_ms": 55.32, "latency_measured_ms": 92.2,
             "latency_error_pct": -40.0, "max_rel_error": 0.0},
            {"mapping": "front_1", "status": "ok", "reason": "",
             "latency_predicted_ms": 10.5, "latency_measured_ms": 10.0,
             "latency_error_pct": 5.0, "max_rel_error": 0.0},
            {"mapping": "front_2", "status": "ok", "reason": "",
             "latency_predicted_ms": 41.0, "latency_measured_ms": 100.0,
             "latency_error_pct": -59.0, "max_rel_error": 0.0},
            {"mapping": "front_3", "status": "failed", "reason": "mpiexec exited with 137"},
        ],
    }  # fmt: skip
    best = {"latency": {"values": {"latency": 55.32}, "table": "| layer |\n|---|\n| c |\n"}}
    page = report.render({**summary, "calibration": "calibrated"}, "t", [], best)
    assert (
        '<div class="warn bad">Phase two: 2 of 3 measured mappings are more than 10 % off their '
        "predicted latency (best_latency -40.0 %, front_2 -59.0 %): the model does not hold for "
        "them on this hardware; see the table below.</div>"
    ) in page
    assert (
        "<tr><td>best_latency</td><td>ok</td><td>55.32</td><td>92.2</td><td>-40.0</td>"
        "<td>more than 10 % off</td><td>0.0</td><td></td></tr>"
    ) in page
    assert (
        "<tr><td>front_1</td><td>ok</td><td>10.5</td><td>10.0</td><td>5.0</td><td></td>"
        "<td>0.0</td><td></td></tr>"
    ) in page
    assert "<td>12.5 s search, 19.6 s phase two, 32.1 s in all</td>" in page
