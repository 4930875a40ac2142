"""`python -m dse.compare` on half-written run directories: each is skipped with one warning
line, the complete runs are still compared, and no traceback; a multirun directory stands for
its runs."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers.cli import ROOT, run_module
from tests.helpers.figures import pixels, showing

#: comparison.png: a panel for the hypervolume and one for the best of each objective (latency,
#: memory, energy by default), four a row, each 4.2 x 3.4 in, 0.6 in for the title, at 110
#: dpi: 4 x 4.2 x 110 = 1848 by (3.4 + 0.6) x 110 = 440 pixels; panel k within columns
#: 462 k to 462 (k + 1).
CONVERGENCE_PIXELS, PANEL_COLUMNS = (440, 1848, 3), 462


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "complete"
    r = run_module(
        "dse",
        "progress=false",
        "+net=alexnet",
        "algorithm.pop_size=8",
        "algorithm.n_gen=2",
        f"hydra.run.dir={out}",
    )
    assert r.returncode == 0, r.stderr
    return out


def damaged(run_dir, parent, name: str):
    """A copy of the complete run, damaged as ``name`` says."""
    d = parent / name
    shutil.copytree(run_dir, d)
    summary, history = d / "summary.json", d / "history.csv"
    text, rows = summary.read_text(), history.read_text()
    if name == "no_history":
        history.unlink()
    elif name == "no_summary":
        summary.unlink()
    elif name == "truncated_summary":
        summary.write_text(text[: len(text) // 2])
    elif name == "empty_summary":
        summary.write_text("")
    elif name == "summary_a_list":
        summary.write_text("[1, 2]")
    elif name == "truncated_history_row":
        history.write_text(rows.rstrip("\n")[:-7])
    elif name == "header_only_history":
        history.write_text(rows.splitlines()[0] + "\n")
    elif name == "truncated_header":
        history.write_text(rows[:10])
    elif name == "nan_in_history":
        lines = rows.splitlines()
        cells = lines[-1].split(",")
        cells[lines[0].split(",").index("hypervolume")] = "nan"
        history.write_text("\n".join([*lines[:-1], ",".join(cells)]) + "\n")
    elif name == "binary_history":
        history.write_bytes(b"\xff\xfe\x00garbage")
    elif name == "objectives_a_string":
        summary.write_text(text.replace('"objectives": [', '"objectives_": ['))
    return d


DAMAGE = [
    "no_history",
    "no_summary",
    "truncated_summary",
    "empty_summary",
    "summary_a_list",
    "truncated_history_row",
    "header_only_history",
    "truncated_header",
    "nan_in_history",
    "binary_history",
    "objectives_a_string",
]


def compare(*args) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dse.compare", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_half_written_runs_are_skipped_with_one_warning_each(run_dir, tmp_path):
    bad = [damaged(run_dir, tmp_path, name) for name in DAMAGE]
    r = compare(run_dir, *bad, "-o", tmp_path / "comparison.png")
    assert r.returncode == 0, r.stderr
    warnings = r.stderr.strip().splitlines()
    assert len(warnings) == len(DAMAGE), r.stderr
    for d, line in zip(bad, warnings, strict=True):
        assert line.startswith(f"warning: skipping {d}:"), line
    assert "Traceback" not in r.stderr
    # the complete run alone is compared: one line, and one curve (C0) in each of the four
    # panels; no second run's colour (C1)
    (line,) = [ln for ln in r.stdout.splitlines() if "hypervolume" in ln]
    assert line.endswith(f"({run_dir})"), line
    image = pixels(tmp_path / "comparison.png")
    assert image.shape == CONVERGENCE_PIXELS
    run = showing(image, "C0")
    panels = [bool(run[:, k * PANEL_COLUMNS : (k + 1) * PANEL_COLUMNS].any()) for k in range(4)]
    assert panels == [True] * 4, f"the run's curve (C0) in the panels: {panels}"
    assert not showing(image, "C1").any(), "a second run's colour (C1) is drawn"


def test_nothing_complete_is_one_error_line(run_dir, tmp_path):
    bad = [damaged(run_dir, tmp_path, name) for name in DAMAGE[:3]]
    r = compare(*bad, tmp_path / "missing")
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0
    assert len(lines) == 5 and lines[-1].startswith("error: no complete run directory"), r.stderr
    assert "Traceback" not in r.stderr


def test_a_multirun_directory_stands_for_its_numbered_runs(run_dir, tmp_path):
    sweep = tmp_path / "multirun"
    for i in (0, 1, 10):
        shutil.copytree(run_dir, sweep / str(i))
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (sweep / "sweep_report.md").write_text("# report\n")
    r = compare(sweep)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no warning for the sweep's own files
    lines = [ln for ln in r.stdout.splitlines() if "hypervolume" in ln]
    assert [ln.rsplit("(", 1)[1] for ln in lines] == [f"{sweep / k})" for k in ("0", "1", "10")]
    # beside the runs, the three drawn: C0, C1, C2 (the same figures: C2, drawn last, covers
    # the others' curves; the legend shows all three), and no fourth colour
    image = pixels(sweep / "comparison.png")
    assert image.shape == CONVERGENCE_PIXELS
    drawn = [bool(showing(image, f"C{k}").any()) for k in range(4)]
    assert drawn == [True, True, True, False], f"colours C0-C3 drawn: {drawn}"


def test_an_output_that_cannot_be_written_is_one_error_line(run_dir, tmp_path):
    (tmp_path / "plots").mkdir()
    r = compare(run_dir, "-o", tmp_path / "plots")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        f"error: -o {tmp_path / 'plots'} is a directory: give the figure's file, "
        f"-o {tmp_path / 'plots' / 'comparison.png'}\n"
    )
    (tmp_path / "a_file").write_text("")
    r = compare(run_dir, "-o", tmp_path / "a_file" / "comparison.png")
    assert r.returncode == 2
    assert r.stderr == (
        f"error: cannot write {tmp_path / 'a_file' / 'comparison.png'} (File exists): "
        "free space there or write elsewhere\n"
    )
