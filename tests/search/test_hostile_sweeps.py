"""Hostile storage and directories for runs and sweeps: a study's storage under a device or
/proc, another application's SQLite file, a study name reused with another search space, a run
or sweep directory under a file, in /proc, read-only or on a full disk. Each is one line and
exit status 2 before any trial or generation runs, and another application's file is left as
it was.

Read-only and full disks are small tmpfs mounts (root only; skipped elsewhere, saying why).
"""

from __future__ import annotations

import errno
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from dse.errors import DseError
from dse.files import write_text
from hydra_plugins.dse_optuna_sweeper._space import SPACE, parse, same_space
from tests.helpers.hostile import assert_each_one_line, run_all

optuna.logging.set_verbosity(optuna.logging.WARNING)

TINY = ["+net=alexnet", "algorithm.pop_size=20", "algorithm.n_gen=2", "progress=false"]
SWEEP = ["--multirun", *TINY, "platform=localhost", "hydra/sweeper=dse_optuna"]


def sqlite_file(path: Path, *statements: str) -> Path:
    with sqlite3.connect(path) as db:
        for s in statements:
            db.execute(s)
    return path


def test_bad_storage_is_one_line_and_another_applications_file_is_untouched(
    tmp_path: Path,
) -> None:
    users = sqlite_file(
        tmp_path / "app.db",
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO users(name) VALUES ('ann')",
    )
    stamped = sqlite_file(tmp_path / "stamped.db", "PRAGMA user_version=7")
    lookalike = sqlite_file(tmp_path / "lookalike.db", "CREATE TABLE studies(x TEXT)")
    (tmp_path / "notes.db").write_text("not a database\n")
    before = {p: p.read_bytes() for p in (users, stamped, lookalike)}
    storages = {
        "under /dev/null": ("sqlite:////dev/null/study.db", "/dev/null is a file, not a folder"),
        "/dev/null itself": ("sqlite:////dev/null", "is not a regular file"),
        "under /proc": ("sqlite:////proc/study.db", "cannot write there (/proc"),
        "another app's tables": (f"sqlite:///{users}", "another application's SQLite database"),
        "an empty app database": (f"sqlite:///{stamped}", "its own version stamp"),
        "a table named studies": (f"sqlite:///{lookalike}", "another application's"),
        "a text file": (f"sqlite:///{tmp_path / 'notes.db'}", "is not a SQLite database"),
    }
    cases, words = {}, {}
    for i, (case, (url, why)) in enumerate(storages.items()):
        args = [*SWEEP, f"hydra.sweeper.storage={url}", f"hydra.sweep.dir={tmp_path / str(i)}"]
        cases[case] = ("dse", [*args, "hydra.sweeper.n_trials=1", "chromosome.splits=choice(2)"])
        words[case] = (f"storage {url}", why, "give a file of its own")
    assert_each_one_line(run_all(cases), words)
    assert {p: p.read_bytes() for p in before} == before
    assert not [p for p in tmp_path.iterdir() if p.name.isdigit()]  # no sweep directory made


def test_a_study_keeps_the_search_space_it_was_made_for() -> None:
    """Another space under a study's name is one line naming each difference; the same
    space, given again, continues the study; a study made before its space was recorded is
    judged by its trials' parameters."""
    study = optuna.create_study()
    first = parse(["chromosome.splits=range(2,6)", "algorithm.pop_size=choice(10,20)"])
    same_space(study, "s", "memory", first)
    assert set(study.user_attrs[SPACE]) == {"chromosome.splits", "algorithm.pop_size"}
    same_space(
        study, "s", "memory", parse(["algorithm.pop_size=10,20", "chromosome.splits=range(2,6)"])
    )
    other = parse(["chromosome.splits=choice(2,3)", "seed=range(0,3)"])
    with pytest.raises(DseError) as err:
        same_space(study, "s", "memory", other)
    text = str(err.value)
    assert text.startswith("study 's' in memory was made for another search space (")
    assert "algorithm.pop_size=choice(10,20) in the study, not in this command" in text
    assert "chromosome.splits: range(2,6,1) in the study, choice(2,3) here" in text
    assert "seed=range(0,3,1) in this command, not in the study" in text
    assert text.endswith("give a new hydra.sweeper.study_name, or sweep the study's own space")
    # a study without the record: its trials' distributions stand for its space
    legacy = optuna.create_study()
    legacy.optimize(lambda t: t.suggest_float("algorithm.mutation.eta", 5, 40), n_trials=2)
    with pytest.raises(DseError, match=r"algorithm.mutation.eta=interval\(5,40\) in the study"):
        same_space(legacy, "old", "memory", first)
    same_space(legacy, "old", "memory", parse(["algorithm.mutation.eta=interval(5,40)"]))


@pytest.mark.slow
def test_a_reused_study_name_with_another_space_is_refused_on_the_command_line(
    tmp_path: Path,
) -> None:
    common = [*SWEEP, "hydra.sweeper.study_name=mine", "hydra.sweeper.n_trials=1"]
    common.append(f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}")
    first = run_all({"first": ("dse", [*common, "chromosome.splits=choice(2)",
                                       f"hydra.sweep.dir={tmp_path / 'a'}"])})["first"]  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    cases = {
        "another key": ("dse", [*common, "algorithm.pop_size=choice(10,20)",
                                f"hydra.sweep.dir={tmp_path / 'b'}"]),
        "another kind": ("dse", [*common, "chromosome.splits=range(2,3)",
                                 f"hydra.sweep.dir={tmp_path / 'c'}"]),
    }  # fmt: skip
    results = run_all(cases)
    for r in results.values():  # Optuna logs that it loads the study: keep our line only
        r.stderr = "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("[I "))
    assert_each_one_line(results, {
        "another key": ("study 'mine'", "algorithm.pop_size=choice(10,20) in this command"),
        "another kind": ("study 'mine'", "chromosome.splits: choice(2) in the study, range(2,3,1)"),
    })  # fmt: skip
    trials = optuna.load_study(study_name="mine", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len(trials.trials) == 1


@pytest.fixture(scope="module")
def mounts(tmp_path_factory) -> Iterator[tuple[Path, Path]]:
    """A read-only tmpfs and a full one (root only)."""
    top = tmp_path_factory.mktemp("mounts")
    ro, full = top / "ro", top / "full"
    ro.mkdir()
    full.mkdir()
    made = []
    try:
        for where, opts in ((ro, "ro,size=1m"), (full, "size=64k")):
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                               capture_output=True, text=True, check=False)  # fmt: skip
            if r.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")
            made.append(where)
        (full / "filler").write_bytes(b"\0" * (64 * 1024 - 4096))
        yield ro, full
    finally:
        for where in made:
            subprocess.run(["umount", str(where)], check=False)


def test_run_and_sweep_directories_that_cannot_be_written_are_one_line(
    tmp_path: Path, mounts
) -> None:
    ro, full = mounts
    (tmp_path / "a_file").write_text("")
    where = {
        "under a file": (tmp_path / "a_file" / "run", "a_file is a file, not a folder"),
        "in /proc": (Path("/proc/dse-run"), "(/proc: No such file or directory)"),
        "read-only": (ro / "run", "Read-only file system"),
        "full": (full / "run", "is on a full disk"),
    }
    cases, words = {}, {}
    for case, (d, why) in where.items():
        cases[f"run {case}"] = ("dse", [*TINY, "platform=localhost", f"hydra.run.dir={d}"])
        words[f"run {case}"] = (f"hydra.run.dir={d}", why)
        sweep = [*SWEEP, "hydra.sweeper.storage=memory", "chromosome.splits=choice(2)"]
        cases[f"sweep {case}"] = ("dse", [*sweep, f"hydra.sweep.dir={d}"])
        words[f"sweep {case}"] = (f"hydra.sweep.dir={d}", why)
    assert_each_one_line(run_all(cases), words)
    assert not (tmp_path / "a_file").is_dir() and list(ro.iterdir()) == []


def test_a_disk_that_fills_while_writing_is_one_line_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch
) -> None:
    path = tmp_path / "summary.json"
    path.write_text("old")

    def full(self, data, *args, **kwargs):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(DseError, match=r"cannot write .*summary.json \(No space left on device\)"):
        write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "summary.json"
    ]


@pytest.mark.parametrize("key", ["hydra.run.dir", "hydra.sweep.dir"])
def test_an_empty_run_or_sweep_directory_is_one_line(key: str, capsys) -> None:
    """hydra.run.dir= with nothing after it (an unset shell variable) is refused, not read as
    the current directory that the run's files would be spread over."""
    from omegaconf import OmegaConf

    from dse.outdirs import CheckOutputDirs

    config = OmegaConf.create({"hydra": {"run": {"dir": ""}, "sweep": {"dir": ""}}})
    with pytest.raises(SystemExit) as stopped:
        CheckOutputDirs._check(config, key)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {key} is empty: give a directory ({key}=runs/mine), or leave the key out for "
        "a new one under runs/\n"
    )
