"""A calibration's journal (dse.calibrate.journal): measurements kept as they are taken, a
resume that measures only what is missing, a refit that measures nothing, and one line for
every way it cannot go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.calibrate.journal import Journal, journal_path, key_of
from dse.calibrate.ondevice import UnitFailed
from dse.errors import DseError
from models_analytical.coefficients import load_coefficients
from tests.helpers.calibrate import platform_localhost
from tests.helpers.cli import run_module
from tests.helpers.hostile import fill, small_disk
from tests.helpers.platforms import platform


def counted(results: dict[str, object]):
    """A measure for each key that counts its calls."""
    calls: list[str] = []

    def measure(key: str):
        def go():
            calls.append(key)
            return results[key]

        return go

    return measure, calls


def test_each_measurement_is_on_the_disk_once_taken_and_a_resume_takes_it_back(tmp_path):
    out = tmp_path / "c.json"
    plat = platform_localhost()
    values = {key_of("a", {"x": 1}): {"t": 1.5}, key_of("b", {"x": 2}): [1, 2]}
    measure, calls = counted(values)
    j = Journal(out, plat, resume=False, refit=False)
    first = list(values)[0]
    assert j.take(first, measure(first)) == {"t": 1.5}
    lines = journal_path(out).read_text().splitlines()  # written before the next one
    assert json.loads(lines[1]) == {"key": first, "result": {"t": 1.5}}
    # killed here: a new calibration refuses to start afresh, a resume goes on
    with pytest.raises(DseError) as err:
        Journal(out, plat, resume=False, refit=False)
    assert str(err.value) == (
        f"a calibration into {out} stopped before its end; its 1 measurements are in "
        f"{journal_path(out)}: resume=true measures only what is missing, refit=true fits "
        "what is there, or delete it to start again"
    )
    j = Journal(out, plat, resume=True, refit=False)
    got = [j.take(k, measure(k)) for k in values]
    assert got == list(values.values()) and calls == [first, list(values)[1]]  # one each
    j.finish()
    # finished: a refit takes everything and measures nothing; a new calibration starts over
    j = Journal(out, plat, resume=False, refit=True)
    assert [j.take(k, measure(k)) for k in values] == list(values.values())
    assert len(calls) == 2
    with pytest.raises(DseError, match="has no measurement of c "):
        j.take(key_of("c", {}), measure(first))
    Journal(out, plat, resume=False, refit=False)
    assert len(journal_path(out).read_text().splitlines()) == 1  # the header alone


def test_a_unit_that_failed_on_its_device_fails_again_when_refitted(tmp_path):
    """A unit's failure on its device (the OOM kill of VGG-16 on 512 MB) is kept with its
    reason: a refit raises the same UnitFailed (the calibration leaves that network out again)
    without running anything, where it stopped for want of a measurement; a unit that ran is
    taken back."""
    out = tmp_path / "c.json"
    plat = platform_localhost()
    calls = []

    def run(request):
        calls.append(request["net"])
        if request["net"] == "vgg16":
            raise UnitFailed("edge1_cpu1 was killed: out of its memory cap of 512 MB")
        return {"layer_s": [0.5]}

    j = Journal(out, plat, resume=False, refit=False)
    unit = j.unit("compute on edge1_cpu1", run)
    with pytest.raises(UnitFailed, match="out of its memory cap of 512 MB"):
        unit({"net": "vgg16"})
    assert unit({"net": "alexnet"}) == {"layer_s": [0.5]}
    j.finish()
    again = Journal(out, plat, resume=False, refit=True).unit("compute on edge1_cpu1", run)
    with pytest.raises(UnitFailed, match="out of its memory cap of 512 MB"):
        again({"net": "vgg16"})
    assert again({"net": "alexnet"}) == {"layer_s": [0.5]}
    assert calls == ["vgg16", "alexnet"]  # the refit ran nothing


def test_a_line_cut_short_by_a_kill_is_left_out(tmp_path):
    out = tmp_path / "c.json"
    plat = platform_localhost()
    j = Journal(out, plat, resume=False, refit=False)
    j.take("k1", lambda: 1)
    with open(journal_path(out), "a") as f:
        f.write('{"key": "k2", "resu')
    assert Journal(out, plat, resume=True, refit=False).take("k1", lambda: 99) == 1


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("both", "resume=true and refit=true: choose one"),
        ("nothing to resume", "resume=true: no measurements to go on with"),
        ("nothing to refit", "refit=true: no measurements to fit"),
        ("another platform", "holds measurements of another platform"),
        ("not a journal", "is not a calibration's journal"),
    ],
)
def test_what_a_journal_cannot_do_is_one_line(tmp_path, case: str, words: str) -> None:
    out = tmp_path / "c.json"
    plat = platform_localhost()
    resume, refit = case != "nothing to refit", case in ("both", "nothing to refit")
    if case == "another platform":
        Journal(out, platform(2), resume=False, refit=False).take("k", lambda: 1)
    if case == "not a journal":
        journal_path(out).write_text('{"hello": 1}\n')
    with pytest.raises(DseError) as err:
        Journal(out, plat, resume=resume, refit=refit)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_calibration_refits_its_journal_and_resumes_an_interrupted_one(tmp_path) -> None:
    """quick=true deployments=false on localhost keeps its journal; refit=true writes the same
    coefficients from it without measuring; cut short of its last two measurements (a kill),
    resume=true takes the others as they were and measures those two."""
    out = tmp_path / "c.json"
    args = ["dse.calibrate", "platform=localhost", "quick=true", "deployments=false", f"out={out}"]
    first = run_module(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    journal = journal_path(out)
    lines = journal.read_text().splitlines()
    assert json.loads(lines[-1])["done"] and len(lines) > 4
    before = load_coefficients(out)
    refit = run_module(*args, "refit=true")
    assert refit.returncode == 0, refit.stderr[-2000:]
    assert load_coefficients(out).types == before.types
    assert journal.read_text().splitlines() == lines  # nothing measured, nothing written
    journal.write_text("\n".join(lines[:-3]) + "\n")
    resumed = run_module(*args, "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again = journal.read_text().splitlines()
    assert again[1:-3] == lines[1:-3] and len(again) == len(lines)  # the same units, reused
    assert again[-3:-1] != lines[-3:-1]  # the last two measured anew


def test_refit_needs_no_cluster(tmp_path: Path) -> None:
    """refit=true measures nothing: a platform whose cluster is not up still refits (here it
    has nothing to refit, and says that)."""
    r = run_module(
        "dse.calibrate", "platform=edge3_ethernet", "platform.name=dsetest-never-up",
        "refit=true", f"out={tmp_path / 'c.json'}",
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: refit=true: no measurements to fit ({tmp_path / 'c.measurements.jsonl'} does "
        "not exist): calibrate without it"
    ]


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    """quick=true out= on a disk that fills: before the journal's first line (nothing left),
    after some measurements (the journal keeps them, whole lines only, to resume), and at the
    coefficients file (the journal keeps them all; refit=true, with space, writes the file)."""
    with small_disk(tmp_path / "disk") as disk:
        out = disk / "cal.json"
        args = ["dse.calibrate", "platform=localhost", "quick=true", "deployments=false"]
        journal = journal_path(out)

        fill(disk, free_kb=0)
        r = run_module(*args, f"out={out}")
        assert last_line(r) == (
            f"error: cannot write {journal} (No space left on device): free space there or "
            "write elsewhere (out=)"
        )
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]

        fill(disk, free_kb=4)  # the platform's line and the first two measurements fit
        r = run_module(*args, f"out={out}")
        lines = [json.loads(x) for x in journal.read_text().splitlines()]  # each whole
        kept = len(lines) - 1
        assert kept >= 1 and all("key" in x for x in lines[1:])
        assert last_line(r) == (
            f"error: cannot write {journal} (No space left on device): its {kept} measurements "
            "are kept; free space there and resume=true measures only what is missing"
        )
        assert sorted(p.name for p in disk.iterdir()) == ["cal.measurements.jsonl", "filler"]

        fill(disk, free_kb=20)  # the journal (~10 kB) fits, the coefficients (~8 kB) not
        r = run_module(*args, f"out={out}")
        assert last_line(r) == (
            f"error: cannot write {out} (No space left on device): free space there and "
            f"refit=true writes it from the measurements in {journal}"
        )
        assert sorted(p.name for p in disk.iterdir()) == ["cal.measurements.jsonl", "filler"]
        (disk / "filler").unlink()
        r = run_module(*args, f"out={out}", "refit=true")
        assert r.returncode == 0 and load_coefficients(out).calibrated, r.stderr[-2000:]


def last_line(r) -> str:  # noqa: ANN001
    """The one line a failed command ends with, after its progress bar; no traceback."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return r.stderr.replace("\r", "\n").strip().splitlines()[-1]
