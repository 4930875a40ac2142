"""The Optuna sweeper (hydra/sweeper=dse_optuna): search-space parsing, reading a job's result,
importances, and real sweeps on AlexNet with SQLite storage (continued, failing, two workers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from dse.errors import DseError
from hydra_plugins.dse_optuna_sweeper import _impl, _report
from hydra_plugins.dse_optuna_sweeper._space import conditional, parse
from tests.helpers.cli import ROOT

optuna.logging.set_verbosity(optuna.logging.WARNING)

TINY = ["+net=alexnet", "algorithm.pop_size=20", "algorithm.n_gen=2", "progress=false"]


# --- search space (no runs) ---------------------------------------------------------------


def test_sweep_syntax_maps_to_optuna_distributions() -> None:
    space = parse(
        [
            "+net=alexnet",
            "chromosome=choice(naive,advanced,vertical)",
            "chromosome.splits=range(2,7)",
            "algorithm.pop_size=choice(100,200,500,1000)",
            "algorithm.mutation.eta=interval(5,40)",
            "algorithm.crossover.eta=tag(log, interval(1,100))",
            "algorithm.max_evaluations=tag(log, int, interval(100,10000))",
            "seed=range(10,0,-2)",
            "algorithm.crossover.prob=range(0.5,1.0,0.25)",
            "objectives=[latency,memory]",
        ]
    )
    d = space.distributions
    assert d["chromosome"] == CategoricalDistribution(["naive", "advanced", "vertical"])
    assert d["chromosome.splits"] == IntDistribution(2, 6, step=1)  # range's stop is excluded
    assert d["algorithm.pop_size"] == CategoricalDistribution([100, 200, 500, 1000])
    assert d["algorithm.mutation.eta"] == FloatDistribution(5.0, 40.0)
    assert d["algorithm.crossover.eta"] == FloatDistribution(1.0, 100.0, log=True)
    assert d["algorithm.max_evaluations"] == IntDistribution(100, 10000, log=True)
    assert d["seed"] == IntDistribution(2, 10, step=2)  # 10, 8, 6, 4, 2
    assert d["algorithm.crossover.prob"] == FloatDistribution(0.5, 0.75, step=0.25)
    assert space.fixed == ["+net=alexnet", "objectives=[latency,memory]"]


def test_a_trials_values_go_back_as_overrides() -> None:
    space = parse(["+net=vgg16", "+x=choice('a b',[1,2],true)", "y=range(1,4)", "z=interval(0,1)"])
    assert space.params["x"].key == "+x"
    out = space.overrides({"x": "[1,2]", "y": 3, "z": 0.25})
    assert out == ["+net=vgg16", "+x=[1,2]", "y=3", "z=0.25"]
    assert space.overrides({"x": "a b", "y": 1, "z": 1e-7})[1:] == ["+x=a\\ b", "y=1", "z=1e-07"]
    assert space.overrides({"x": True, "y": 1, "z": 0.5})[1] == "+x=True"


def test_params_from_the_config_yield_to_the_command_line() -> None:
    space = parse(["a=choice(1,2)", "b=5"], params={"a": "range(1,3)", "b": "choice(x,y)"})
    assert space.distributions == {"a": CategoricalDistribution([1, 2])}
    assert space.fixed == ["b=5"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("a=interval(5,5)", "start below its end"),
        ("a=tag(log, interval(0,1))", "above zero"),
        ("a=tag(loog, interval(1,2))", "unknown tag loog"),
        ("a=tag(int, interval(1.2,1.8))", "no whole number"),
        ("a=tag(log, choice(1,2))", "apply to interval"),
        ("a=range(3,3)", "empty"),
        ("a=choice(1,1)", "twice"),
        ("a=range(2,6,0)", "step other than 0"),
    ],
)
def test_a_bad_sweep_is_one_line(line: str, why: str) -> None:
    with pytest.raises(DseError, match=why):
        parse([line])


ENCODINGS = {
    f"chromosome.{k}": "chromosome=naive,advanced" for k in ("splits", "shares", "spatial")
}


def test_a_key_that_does_not_apply_to_a_choice_is_sampled_after_it_and_only_where_it_applies():
    space = parse(["chromosome.splits=range(2,7)", "chromosome=choice(naive,advanced,vertical)"])
    conditional(space, ENCODINGS)
    assert space.order() == ["chromosome", "chromosome.splits"]
    assert space.applies("chromosome.splits", {"chromosome": "advanced"})
    assert not space.applies("chromosome.splits", {"chromosome": "vertical"})
    assert space.overrides({"chromosome": "vertical"}) == ["chromosome=vertical"]
    # a default condition lifted: the key applies to every choice
    lifted = parse(["chromosome=choice(naive,vertical)", "chromosome.splits=range(2,7)"])
    conditional(lifted, {**ENCODINGS, "chromosome.splits": ""})
    assert lifted.when == {} and lifted.applies("chromosome.splits", {"chromosome": "vertical"})
    # a condition on keys this command does not sweep is moot
    alone = parse(["chromosome.splits=range(2,7)"])
    conditional(alone, ENCODINGS)
    assert alone.when == {} and alone.order() == ["chromosome.splits"]


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"b": "a"}, "hydra.sweeper.conditions.b=a: write it as OTHER_KEY=choice,choice"),
        (
            {"b": "a=z"},
            "hydra.sweeper.conditions.b=a=z: b applies to none of a's choices (x,y): sweep a "
            "over one of z, or do not sweep b",
        ),
        ({"a": "c=1"}, "hydra.sweeper.conditions.a=c=1: c is not swept as a choice"),
        (
            {"a": "b=1", "b": "a=x"},
            "hydra.sweeper.conditions: a, b depend on each other: make one of them unconditional",
        ),
    ],
)
def test_a_bad_condition_is_one_line(conditions: dict[str, str], message: str) -> None:
    space = parse(["a=choice(x,y)", "b=choice(1,2)", "c=range(1,3)"])
    with pytest.raises(DseError) as caught:
        conditional(space, conditions)
    assert str(caught.value) == message


def test_objectives_and_directions() -> None:
    pair = _impl.objectives_and_directions
    assert pair("hypervolume", "maximize") == (["hypervolume"], ["maximize"])
    assert pair(["hypervolume", "evaluations"], ["maximize", "minimize"]) == (
        ["hypervolume", "evaluations"],
        ["maximize", "minimize"],
    )
    assert pair(["a", "b"], "minimize") == (["a", "b"], ["minimize", "minimize"])
    with pytest.raises(DseError, match="one direction per objective"):
        pair(["a", "b", "c"], ["maximize", "minimize"])
    with pytest.raises(DseError, match="choose maximize or minimize"):
        pair("a", "up")


def test_the_default_study_name_follows_the_command() -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"net": {"name": "vgg16"}})
    a = parse(["+net=vgg16", "chromosome.splits=range(2,7)"])
    name = _impl.default_study_name(cfg, a, ["hypervolume"], ["maximize"])
    assert name.startswith("vgg16-")
    same = parse(["chromosome.splits=range(2,7)", "+net=vgg16"])
    assert _impl.default_study_name(cfg, same, ["hypervolume"], ["maximize"]) == name
    wider = parse(["+net=vgg16", "chromosome.splits=range(2,8)"])
    assert _impl.default_study_name(cfg, wider, ["hypervolume"], ["maximize"]) != name
    assert _impl.default_study_name(cfg, a, ["evaluations"], ["minimize"]) != name


# --- a job's return value -> the trial ------------------------------------------------------


def job(value: object, status: JobStatus = JobStatus.COMPLETED) -> JobReturn:
    ret = JobReturn(overrides=["a=1"], status=status)
    ret.return_value = value
    return ret


def test_a_trials_values_are_read_from_the_jobs_return() -> None:
    result = {
        "status": "ok",
        "run_dir": "/r/0",
        "best": {"latency": {"latency": 0.012}},
        "hypervolume": 0.75,
        "evaluations": 1234,
        "wall_seconds": 2.5,
    }
    got = _impl.outcome(job(result), ["hypervolume", "evaluations", "best.latency.latency"])
    assert got.values == [0.75, 1234.0, 0.012]
    assert got.reason is None
    assert got.attrs == {"run_dir": "/r/0", "hypervolume": 0.75, "evaluations": 1234,
                         "wall_seconds": 2.5}  # fmt: skip
    assert _impl.outcome(job(0.5), ["score"]).values == [0.5]


def test_a_failed_or_raising_job_is_a_failed_trial_with_its_reason() -> None:
    failed = _impl.outcome(job({"status": "failed", "reason": "splits=9 > 2"}), ["hypervolume"])
    assert (failed.values, failed.reason) == (None, "splits=9 > 2")
    raised = _impl.outcome(job(RuntimeError("boom\nmore"), JobStatus.FAILED), ["hypervolume"])
    assert (raised.values, raised.reason) == (None, "RuntimeError: boom")
    assert "RuntimeError: boom" in str(raised.traceback)
    missing = _impl.outcome(job({"status": "ok", "evaluations": 3}), ["hypervolume"])
    assert missing.reason == "the job returned no 'hypervolume' (it has status, evaluations)"
    nan = _impl.outcome(job({"status": "ok", "hypervolume": float("nan")}), ["hypervolume"])
    assert nan.reason == "hypervolume is nan"


def test_importances_rank_the_parameter_the_value_depends_on() -> None:
    study = optuna.create_study(direction="maximize")
    dists = {"x": FloatDistribution(0, 1), "y": FloatDistribution(0, 1)}
    for i in range(20):
        x, y = (i * 7 % 20) / 20, (i * 11 % 20) / 20
        study.add_trial(create_trial(params={"x": x, "y": y}, distributions=dists, value=x * x))
    found, note = _report.importances(study, ["v"], ["x", "y"])
    assert note is None and found is not None
    assert found["v"]["x"] > 0.9 > 0.1 > found["v"]["y"]
    few, note = _report.importances(study, ["v"], ["x", "y"], minimum=21)
    assert few is None and "at least 21" in str(note)


# --- real sweeps (subprocesses, SQLite) -----------------------------------------------------


def sweep(tmp: Path, name: str, *args: str, out: str = "sweep") -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dse",
            "--multirun",
            *TINY,
            "platform=localhost",
            "hydra/sweeper=dse_optuna",
            f"hydra.sweeper.study_name={name}",
            f"hydra.sweeper.storage=sqlite:///{tmp / 'study.db'}",
            f"hydra.sweep.dir={tmp / out}",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def load(tmp: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp / 'study.db'}")


def summary_hypervolume(run_dir: str) -> float:
    return float(json.loads((Path(run_dir) / "summary.json").read_text())["hypervolume"])


def test_a_sweep_records_trials_continues_and_survives_a_failing_trial(tmp_path: Path) -> None:
    # localhost has 2 devices: chromosome.splits=3 is refused by the run (a failed trial).
    # Enqueue 3 then 2 so both kinds come first, whatever the sampler would choose.
    study = optuna.create_study(
        study_name="t", storage=f"sqlite:///{tmp_path / 'study.db'}", direction="maximize"
    )
    study.enqueue_trial({"chromosome.splits": 3})
    study.enqueue_trial({"chromosome.splits": 2})
    space = ["chromosome.splits=choice(2,3)", "hydra.sweeper.n_trials=2"]
    first = sweep(tmp_path, "t", *space)
    assert "Traceback" not in first.stderr, first.stderr
    assert first.returncode == 0, first.stderr  # a failed trial is a result, not a failure
    trials = load(tmp_path, "t").trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    failed, done = trials
    assert failed.params == {"chromosome.splits": 3}
    assert "number of devices (2)" in failed.user_attrs["fail_reason"]
    assert done.user_attrs["overrides"] == [*TINY, "platform=localhost", "chromosome.splits=2"]
    # the trial's value is the hypervolume its run wrote
    assert done.value == summary_hypervolume(done.user_attrs["run_dir"])
    assert Path(done.user_attrs["run_dir"]).parent == tmp_path / "sweep"
    report = json.loads((tmp_path / "sweep" / "sweep_report.json").read_text())
    assert report["trials"] == {"total": 2, "complete": 1, "fail": 1}
    assert [b["number"] for b in report["best"]] == [done.number]
    assert report["best"][0]["run_dir"] == done.user_attrs["run_dir"]
    assert f"best: trial {done.number}: hypervolume=" in first.stdout

    again = sweep(tmp_path, "t", *space, "hydra.sweeper.n_trials=1", out="again")
    assert "Traceback" not in again.stderr, again.stderr
    assert "2 trials so far" in again.stdout
    assert len(load(tmp_path, "t").trials) == 3


def test_a_sweep_whose_trials_all_failed_ends_in_an_error(tmp_path: Path) -> None:
    """localhost has 2 devices: every trial of chromosome.splits=3 is refused by its run. The
    study and the report keep the failed trials, and the command says none completed (exit 2),
    not a sweep that succeeded."""
    r = sweep(tmp_path, "f", "chromosome.splits=choice(3)", "hydra.sweeper.n_trials=2")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == (
        "error: no trial this command ran completed (2 failed, the reasons above): fix what "
        "they name and run it again"
    )
    assert [t.state for t in load(tmp_path, "f").trials] == [TrialState.FAIL] * 2
    report = json.loads((tmp_path / "sweep" / "sweep_report.json").read_text())
    assert report["trials"] == {"total": 2, "fail": 2}


def test_brute_force_over_a_continuous_interval_is_one_line_naming_it(tmp_path: Path) -> None:
    """Brute force tries every value: a continuous interval (even on a log scale) is refused
    before any trial, naming the parameter; stepped and whole-number ones are enumerable."""
    r = sweep(
        tmp_path,
        "b",
        "hydra/sweeper/sampler=bruteforce",
        "chromosome.splits=choice(2)",
        "algorithm.mutation.eta=interval(5,40)",
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == (
        "error: hydra/sweeper/sampler=bruteforce tries every value, but "
        "algorithm.mutation.eta=interval(5,40) is continuous: give it a step "
        "(range(start,stop,step)) or choices (choice(a,b,...)), or choose another sampler"
    )
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "study.db").exists()
    brute = _impl.make_sampler(OmegaConf.create({"name": "bruteforce", "seed": 0, "options": {}}))
    with pytest.raises(DseError, match=r"but a=tag\(log, interval\(1,100\)\) is continuous"):
        _impl.enumerable(parse(["a=tag(log, interval(1,100))"]), brute)
    for fine in ("a=range(0.5,1.0,0.25)", "a=tag(int, interval(1,5))", "a=choice(x,y)"):
        _impl.enumerable(parse([fine]), brute)
    tpe = _impl.make_sampler(OmegaConf.create({"name": "tpe", "seed": 0, "options": {}}))
    _impl.enumerable(parse(["a=interval(5,40)"]), tpe)


def test_two_workers_share_one_sqlite_study(tmp_path: Path) -> None:
    args = ["algorithm.mutation.eta=interval(5,40)", "hydra.sweeper.n_trials=2"]
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dse",
                "--multirun",
                *TINY,
                "platform=localhost",
                "hydra/sweeper=dse_optuna",
                "hydra.sweeper.study_name=shared",
                f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
                f"hydra.sweep.dir={tmp_path / f'w{i}'}",
                *args,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for w in workers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    trials = load(tmp_path, "shared").trials
    assert sorted(t.number for t in trials) == list(range(4))
    assert all(t.state == TrialState.COMPLETE for t in trials)
    by_worker: dict[str, list[str]] = {}
    for t in trials:
        by_worker.setdefault(t.user_attrs["worker"], []).append(t.user_attrs["run_dir"])
        assert t.value == summary_hypervolume(t.user_attrs["run_dir"])
    # each worker ran its 2 trials, each in its own run directory
    assert sorted(len(v) for v in by_worker.values()) == [2, 2]
    assert len({d for v in by_worker.values() for d in v}) == 4


def test_no_trial_is_wasted_on_a_setting_already_run_nor_on_a_key_that_does_not_apply(
    tmp_path: Path,
) -> None:
    """vertical splits no layer: its trial gets no chromosome.splits; the second naive,
    splits=2 trial is the first one's settings: its values are reused, nothing runs again."""
    study = optuna.create_study(
        study_name="w", storage=f"sqlite:///{tmp_path / 'study.db'}", direction="maximize"
    )
    study.enqueue_trial({"chromosome": "vertical"})
    for _ in range(2):
        study.enqueue_trial({"chromosome": "naive", "chromosome.splits": 2})
    r = sweep(
        tmp_path,
        "w",
        "chromosome=choice(naive,vertical)",
        "chromosome.splits=choice(2)",
        "hydra.sweeper.n_trials=3",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    vertical, first, again = load(tmp_path, "w").trials
    assert vertical.params == {"chromosome": "vertical"}
    assert vertical.user_attrs["overrides"] == [*TINY, "platform=localhost", "chromosome=vertical"]
    assert first.params == again.params == {"chromosome": "naive", "chromosome.splits": 2}
    assert [t.state for t in (vertical, first, again)] == [TrialState.COMPLETE] * 3
    assert again.user_attrs["reused_from"] == first.number
    assert again.values == first.values
    assert again.user_attrs["run_dir"] == first.user_attrs["run_dir"]
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == ["0", "1"]
    assert (
        f"trial 2: hypervolume={first.values[0]:.6g}, the settings of trial 1 (reused)" in r.stdout
    )


def test_a_setting_run_under_other_fixed_settings_is_run_again(tmp_path: Path) -> None:
    """A worker started with another fixed setting (seed=1) on the same study runs naive,
    splits=2 itself: the first run's values are another command's, not reused."""
    study = optuna.create_study(
        study_name="f", storage=f"sqlite:///{tmp_path / 'study.db'}", direction="maximize"
    )
    space = ("chromosome=choice(naive)", "chromosome.splits=choice(2)", "hydra.sweeper.n_trials=1")
    study.enqueue_trial({"chromosome": "naive", "chromosome.splits": 2})
    assert sweep(tmp_path, "f", *space, out="a").returncode == 0
    study.enqueue_trial({"chromosome": "naive", "chromosome.splits": 2})
    r = sweep(tmp_path, "f", *space, "seed=1", out="b")
    assert r.returncode == 0, r.stderr[-2000:]
    first, other = load(tmp_path, "f").trials
    assert first.params == other.params and "reused_from" not in other.user_attrs
    assert "seed=1" in other.user_attrs["overrides"]
    assert other.user_attrs["run_dir"] != first.user_attrs["run_dir"]
    assert other.value == summary_hypervolume(other.user_attrs["run_dir"])


def test_brute_force_tries_each_setting_once_and_stops_when_all_are_tried(tmp_path: Path):
    """choice(naive,vertical) x splits 2: naive,2 and vertical (which takes no splits), two
    settings; five trials asked for: two run, then the sweep says brute force is done."""
    r = sweep(
        tmp_path,
        "bf",
        "hydra/sweeper/sampler=bruteforce",
        "chromosome=choice(naive,vertical)",
        "chromosome.splits=choice(2)",
        "hydra.sweeper.n_trials=5",
    )
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-2000:]
    trials = load(tmp_path, "bf").trials
    assert sorted(map(str, (t.params for t in trials))) == sorted(
        map(str, ({"chromosome": "naive", "chromosome.splits": 2}, {"chromosome": "vertical"}))
    )
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert "every setting of the search space has been tried (brute force)" in r.stdout


def test_the_report_lists_the_pareto_trials_of_a_multi_objective_study(tmp_path: Path) -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    dist = {"x": IntDistribution(0, 9)}
    # (hypervolume, evaluations): (1.5, 30) is dominated by (2, 20); the others are not
    for x, values in enumerate([(1.0, 10), (2.0, 20), (1.5, 30), (0.5, 5)]):
        attrs = {"run_dir": f"/r/{x}"}
        trial = create_trial(params={"x": x}, distributions=dist, values=values, user_attrs=attrs)
        study.add_trial(trial)
    study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={"fail_reason": "a | b"}))
    report = _report.summarize(study, ["hypervolume", "evaluations"], parse(["x=range(0,10)"]))
    assert [b["number"] for b in report["best"]] == [0, 1, 3]
    assert report["best"][1] == {
        "number": 1,
        "values": {"hypervolume": 2.0, "evaluations": 20.0},
        "params": {"x": 1},
        "run_dir": "/r/1",
        "overrides": None,
    }
    assert report["trials"] == {"total": 5, "complete": 4, "fail": 1}
    assert report["failures"] == {4: "a | b"}
    _report.write(report, tmp_path)
    md = (tmp_path / "sweep_report.md").read_text()
    assert "| 1 | 2 | 20 | `x=1` | `/r/1` |" in md
    assert "| 4 | a / b |" in md  # a bar would end the table cell
    assert json.loads((tmp_path / "sweep_report.json").read_text())["best"] == report["best"]
    assert "3 Pareto trials:" in _report.text(report)
