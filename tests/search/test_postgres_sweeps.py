"""The Optuna sweeper on a real PostgreSQL server (the ``postgres`` fixture's own): trials
recorded and continued, several workers on one study, a worker killed mid-trial, the password
kept out of everything a sweep writes, and bad servers, credentials and URLs in one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from dse.errors import DseError
from hydra_plugins.dse_optuna_sweeper._storage import Options, one_at_a_time, open_storage
from tests.helpers import postgres as pg
from tests.helpers.cli import ROOT, reaped, wait_until
from tests.helpers.postgres import Server, free_port

optuna.logging.set_verbosity(optuna.logging.WARNING)

TINY = ["+net=alexnet", "algorithm.pop_size=20", "algorithm.n_gen=2", "progress=false"]
TIMEOUT_S = 300


def command(
    url: str, sweep_dir: Path, *args: str, study: str = "pg", platform: str = "localhost"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dse",
        "--multirun",
        *TINY,
        f"platform={platform}",
        "hydra/sweeper=dse_optuna",
        f"hydra.sweeper.study_name={study}",
        f"hydra.sweeper.storage={url}",
        f"hydra.sweep.dir={sweep_dir}",
        *args,
    ]


def worker_env(server: Server, **more: str) -> dict[str, str]:
    return {**os.environ, **server.env, **more}


def sweep(server: Server, url: str, sweep_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(url, sweep_dir, *args),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=worker_env(server),
        timeout=TIMEOUT_S,
        check=False,
    )


def storage(server: Server, db: str) -> optuna.storages.RDBStorage:
    """The test's own connection to the study (the password given to the driver)."""
    return optuna.storages.RDBStorage(
        server.url(db), engine_kwargs={"connect_args": {"password": server.password}}
    )


def test_a_sweep_on_postgres_records_trials_continues_and_records_failures(
    postgres: Server, tmp_path: Path
) -> None:
    # localhost has 2 devices: chromosome.splits=3 is refused by the run (a failed trial)
    db = postgres.database()
    study = optuna.create_study(
        study_name="pg", storage=storage(postgres, db), direction="maximize"
    )
    study.enqueue_trial({"chromosome.splits": 3})
    study.enqueue_trial({"chromosome.splits": 2})
    space = ["chromosome.splits=choice(2,3)", "hydra.sweeper.n_trials=2"]
    first = sweep(postgres, postgres.url(db), tmp_path / "a", *space)
    assert "Traceback" not in first.stderr, first.stderr
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"study 'pg' in {postgres.url(db)}: 2 trials so far" in first.stdout  # enqueued
    trials = optuna.load_study(study_name="pg", storage=storage(postgres, db)).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "number of devices (2)" in trials[0].user_attrs["fail_reason"]
    assert Path(trials[1].user_attrs["run_dir"]).parent == tmp_path / "a"

    # the next invocation continues the study; its trial (enqueued: splits=2 again) is trial
    # 1's settings, so its values are reused and nothing runs
    study.enqueue_trial({"chromosome.splits": 2})
    again = sweep(postgres, postgres.url(db), tmp_path / "b", *space, "hydra.sweeper.n_trials=1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"study 'pg' in {postgres.url(db)}: 3 trials so far" in again.stdout
    assert "Warning" not in first.stderr + again.stderr
    trials = optuna.load_study(study_name="pg", storage=storage(postgres, db)).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert trials[2].user_attrs["reused_from"] == 1 and trials[2].values == trials[1].values
    assert not (tmp_path / "b" / "0").exists()


def test_two_workers_share_one_postgres_study_within_total_trials(
    postgres: Server, tmp_path: Path
) -> None:
    """Two worker processes, each asked for 3 trials, on a study capped at 4: 4 trials, each
    run once, in its own run directory."""
    db = postgres.database()
    args = [
        "algorithm.mutation.eta=interval(5,40)",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.total_trials=4",
    ]
    workers = [
        subprocess.Popen(
            command(postgres.url(db), tmp_path / f"w{i}", *args, study="shared"),
            cwd=ROOT,
            env=worker_env(postgres),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for w in workers:
        with reaped(w):
            _, err = w.communicate(timeout=TIMEOUT_S)
        assert w.returncode == 0, err[-2000:]
    trials = optuna.load_study(study_name="shared", storage=storage(postgres, db)).trials
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    run_dirs = [t.user_attrs["run_dir"] for t in trials]
    assert len(set(run_dirs)) == 4 and all(Path(d, "summary.json").is_file() for d in run_dirs)
    assert len({t.user_attrs["worker"] for t in trials}) == 2
    assert len({t.params["algorithm.mutation.eta"] for t in trials}) == 4


def one_trial_running(probe: optuna.storages.BaseStorage) -> bool:
    """Whether study ``pg`` holds one trial, running."""
    try:
        study = optuna.load_study(study_name="pg", storage=probe)
    except KeyError:
        return False
    return [t.state for t in study.trials] == [TrialState.RUNNING]


def test_a_worker_killed_mid_trial_is_noticed_and_its_trial_retried_once(
    postgres: Server, tmp_path: Path
) -> None:
    """A worker SIGKILLed while its trial runs stops beating; the next worker fails that
    trial (no trial RUNNING for ever) and, asked to retry, runs its settings again, linked."""
    db = postgres.database()
    url = postgres.url(db)
    beats = ["hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=3"]
    space = ["algorithm.mutation.eta=interval(5,40)", "hydra.sweeper.n_trials=1"]
    slow = subprocess.Popen(
        # eight devices and no end of generations: a trial that runs until it is killed
        [
            *command(url, tmp_path / "dead", *space, *beats, platform="jetson_xavier_nx_x8"),
            "algorithm.n_gen=100000",
        ],
        cwd=ROOT,
        env=worker_env(postgres),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    with reaped(slow):
        probe = storage(postgres, db)

        assert wait_until(lambda: one_trial_running(probe), 120), "it never started its trial"
        time.sleep(1.5)  # it is beating
        os.killpg(slow.pid, signal.SIGKILL)
        slow.wait()
    dead = optuna.load_study(study_name="pg", storage=probe).trials[0]
    assert dead.state == TrialState.RUNNING  # nobody has noticed yet

    time.sleep(3.5)  # past the grace period
    r = sweep(postgres, url, tmp_path / "next", *space, *beats, "hydra.sweeper.retry_failed=1")
    assert r.returncode == 0, r.stderr[-2000:]
    trials = optuna.load_study(study_name="pg", storage=probe).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].params == dead.params  # the same settings, run again
    assert trials[1].user_attrs["retry_of"] == 0
    assert Path(trials[1].user_attrs["run_dir"]).parent == tmp_path / "next"


def test_a_worker_silent_past_the_grace_period_finds_its_trial_failed_and_says_so(
    postgres: Server, tmp_path: Path
) -> None:
    """A worker stopped (SIGSTOP) mid-trial past the grace period has its trial failed by the
    next worker; resumed, it finishes its run and says its result is not recorded, in one
    line, not a traceback."""
    db = postgres.database()
    url = postgres.url(db)
    beats = ["hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=3"]
    space = ["algorithm.mutation.eta=interval(5,40)", "hydra.sweeper.n_trials=1"]
    stalled = subprocess.Popen(
        [
            *command(url, tmp_path / "stalled", *space, *beats, platform="jetson_xavier_nx_x8"),
            "algorithm.n_gen=3000",  # a run of some seconds, over sixteen devices
        ],
        cwd=ROOT,
        env=worker_env(postgres),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with reaped(stalled):
        probe = storage(postgres, db)

        assert wait_until(lambda: one_trial_running(probe), 120), "it never started its trial"
        time.sleep(1.5)  # in its run
        os.killpg(stalled.pid, signal.SIGSTOP)
        time.sleep(4)  # past the grace period
        other = sweep(postgres, url, tmp_path / "other", *space, *beats)
        assert other.returncode == 0, other.stderr[-2000:]
        os.killpg(stalled.pid, signal.SIGCONT)
        _, err = stalled.communicate(timeout=TIMEOUT_S)
    assert "Traceback" not in err, err[-3000:]
    assert stalled.returncode == 2  # the one trial it ran is not its result: nothing completed
    assert (
        "trial 0 was failed meanwhile by another worker (no heartbeat within "
        "hydra.sweeper.grace_period): its result is not recorded"
    ) in err.splitlines()
    trials = optuna.load_study(study_name="pg", storage=probe).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "run_dir" not in trials[0].user_attrs


def test_asking_for_trials_waits_for_another_worker_but_not_for_ever(
    postgres: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """One worker asks at a time (the count against total_trials and the asks); one stopped
    while asking holds the others only ``wait_s``, then they ask without it, saying so."""
    held = storage(postgres, postgres.database())
    with one_at_a_time(held, "s"):
        started = time.monotonic()
        with one_at_a_time(held, "s", wait_s=0.5):  # another connection: another worker
            waited = time.monotonic() - started
    assert waited >= 0.5
    assert capsys.readouterr().err == (
        "another worker of study 's' has been asking for trials for 0.5 s (stopped?): asking "
        "without waiting for it\n"
    )
    started = time.monotonic()
    with one_at_a_time(held, "s", wait_s=5):  # free again
        assert time.monotonic() - started < 1
    assert capsys.readouterr().err == ""


def files_holding(root: Path, secret: str) -> list[str]:
    found = []
    for p in root.rglob("*"):
        if p.is_file() and secret.encode() in p.read_bytes():
            found.append(str(p))
    return found


def command_lines_holding(secret: str) -> list[str]:
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if secret.encode() in (p / "cmdline").read_bytes():
                found.append(p.name)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", ["PGPASSWORD", "password_file"])
def test_the_password_is_in_no_file_a_sweep_writes_nor_command_line(
    postgres: Server, tmp_path: Path, how: str
) -> None:
    db = postgres.database()
    out = tmp_path / "sweep"
    args = ["algorithm.mutation.eta=interval(5,40)", "hydra.sweeper.n_trials=2"]
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    if how == "PGPASSWORD":
        env["PGPASSWORD"] = postgres.password
    else:
        secret_file = tmp_path / "secret" / "pgpass"
        secret_file.parent.mkdir()
        secret_file.write_text(postgres.password + "\n")
        args.append(f"hydra.sweeper.password_file={secret_file}")
    proc = subprocess.Popen(
        command(postgres.url(db), out, *args),
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    with reaped(proc):
        while proc.poll() is None:
            seen += command_lines_holding(postgres.password)
            time.sleep(0.2)
        stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr[-2000:]
    assert not seen, f"processes with the password on their command line: {seen}"
    assert postgres.password not in stdout + stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "secret" not in p.parts]
    assert any(p.name == "summary.json" for p in written)
    assert any(p.name == "overrides.yaml" for p in written)
    assert any(p.name == "sweep_report.json" for p in written)
    leaks = [f for f in files_holding(tmp_path, postgres.password) if "secret" not in f]
    assert not leaks


def test_a_server_goes_with_its_test_process_even_when_that_is_killed() -> None:
    """The fixture's server and folder are removed by its watchdog once the process that
    started it is SIGKILLed (no finalizer runs)."""
    if pg.missing():
        pytest.skip(str(pg.missing()))
    code = (
        "from tests.helpers import postgres as pg; import time; s = pg.start(); "
        "print(s.proc.pid, s.root, flush=True); time.sleep(600)"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    with reaped(owner):
        assert owner.stdout is not None
        postmaster, root = owner.stdout.readline().split()
        assert pg.pid_alive(int(postmaster)) and Path(root).is_dir()
        owner.kill()
        owner.wait()
    assert wait_until(lambda: not Path(root).exists(), 15)
    assert wait_until(lambda: not pg.pid_alive(int(postmaster)) or pg.zombie(int(postmaster)), 5)


# --- bad input: one line each, nothing created --------------------------------------------


def test_a_url_holding_a_password_is_refused_before_anything_is_written(
    postgres: Server, tmp_path: Path
) -> None:
    db = postgres.database()
    url = f"postgresql://dse:{postgres.password}@127.0.0.1:{postgres.port}/{db}"
    r = sweep(postgres, url, tmp_path / "s", "algorithm.mutation.eta=interval(5,40)")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"error: hydra.sweeper.storage=postgresql://dse:***@127.0.0.1:{postgres.port}/{db} "
        "holds a password, which would be saved in every run's .hydra/ and shown in process "
        "lists: remove it from the URL and give it in PGPASSWORD, ~/.pgpass or "
        "hydra.sweeper.password_file"
    )
    assert not (tmp_path / "s").exists()


def test_a_url_sqlalchemy_cannot_read_is_shown_without_its_password() -> None:
    """A port that is not a number: SQLAlchemy refuses the URL, and the line that says so
    shows it with the password masked all the same."""
    from hydra_plugins.dse_optuna_sweeper._storage import masked

    assert masked("postgresql://dse:s3cret@dbhost:54x2/optuna") == (
        "postgresql://dse:***@dbhost:54x2/optuna"
    )
    with pytest.raises(DseError) as err:
        open_storage("postgresql://dse:s3cret@dbhost:54x2/optuna", Options())
    assert "s3cret" not in str(err.value) and "dse:***@" in str(err.value)


def test_the_dashboard_is_named_with_the_driver_it_needs() -> None:
    """The command the sweeper prints reaches a server with the driver dse installs."""
    from hydra_plugins.dse_optuna_sweeper._storage import dashboard_install, with_driver

    url = "postgresql://sweeper@dbhost:5432/optuna"
    assert dashboard_install(url) == "pip install optuna-dashboard 'psycopg[binary]'"
    assert with_driver(url) == "postgresql+psycopg://sweeper@dbhost:5432/optuna"
    assert dashboard_install("sqlite:///runs/sweeps/s.db") == "pip install optuna-dashboard"


def test_a_server_that_does_not_answer_is_one_line_with_the_time_waited() -> None:
    # a socket that takes connections (the kernel's backlog) and never answers
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgresql://dse@127.0.0.1:{port}/db"
        started = time.monotonic()
        with pytest.raises(DseError) as caught:
            open_storage(url, Options(connect_timeout=2))
        waited = time.monotonic() - started
    assert str(caught.value) == (
        f"storage {url}: the server at 127.0.0.1:{port} did not answer within 2 s: check the "
        "host, the port and the firewall (hydra.sweeper.connect_timeout waits longer)"
    )
    assert 1.5 < waited < 10  # one wait, not one per retry


def test_no_server_at_the_port_is_one_line() -> None:
    port = free_port()
    url = f"postgresql://dse@127.0.0.1:{port}/db"
    with pytest.raises(DseError) as caught:
        open_storage(url)
    assert str(caught.value) == (
        f"storage {url}: no server listens at 127.0.0.1:{port} (connection refused): start "
        "it, or give its host and port"
    )


def test_wrong_credentials_are_one_line(postgres: Server, tmp_path: Path) -> None:
    db = postgres.database()
    url = postgres.url(db)
    wrong = tmp_path / "pw"
    wrong.write_text("not-the-password\n")
    with pytest.raises(DseError) as caught:
        open_storage(url, Options(password_file=str(wrong)))
    assert str(caught.value) == (
        f"storage {url}: the server refused user 'dse' (wrong or missing password): give the "
        "password in PGPASSWORD, ~/.pgpass or hydra.sweeper.password_file"
    )
    # nothing was made in the database
    assert optuna.get_all_study_names(storage(postgres, db)) == []


def test_a_database_that_does_not_exist_is_one_line(postgres: Server, tmp_path: Path) -> None:
    url = postgres.url("nosuchdb")
    secret = tmp_path / "pw"
    secret.write_text(postgres.password)
    with pytest.raises(DseError) as caught:
        open_storage(url, Options(password_file=str(secret)))
    assert str(caught.value) == (
        f"storage {url}: the server at 127.0.0.1:{postgres.port} has no database 'nosuchdb': "
        "create it (createdb -O dse nosuchdb) or name another"
    )


def test_a_driver_that_is_not_installed_is_named_with_its_package() -> None:
    with pytest.raises(DseError) as caught:
        open_storage("postgresql+pg8000://dse@127.0.0.1:5432/db")
    assert str(caught.value) == (
        "storage postgresql+pg8000://dse@127.0.0.1:5432/db: its database driver is not "
        "installed: pip install pg8000"
    )


def test_a_study_of_the_same_name_with_other_objectives_is_refused(
    postgres: Server, tmp_path: Path
) -> None:
    db = postgres.database()
    optuna.create_study(study_name="pg", storage=storage(postgres, db), direction="minimize")
    r = sweep(postgres, postgres.url(db), tmp_path / "s", "algorithm.mutation.eta=interval(5,40)")
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: study 'pg' in {postgres.url(db)} optimises ? (minimize), not ['hypervolume'] "
        "(maximize): give another hydra.sweeper.study_name"
    )
    trials = optuna.load_study(study_name="pg", storage=storage(postgres, db)).trials
    assert trials == [] and not (tmp_path / "s").exists()
