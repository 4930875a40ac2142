"""A sweep's workers on the boards of an emulated cluster, sharing one Optuna study on a
PostgreSQL server of the launching machine (reached at the cluster's head address), as a team
shares one study from several hosts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from dse.cluster import parse_spec, up
from tests.helpers import postgres as pg
from tests.helpers.cli import ROOT, reaped
from tests.helpers.cluster import make_platform

pytestmark = [pytest.mark.slow]

SWEEP = [
    "+net=alexnet",
    "algorithm.pop_size=20",
    "algorithm.n_gen=2",
    "progress=false",
    "platform=localhost",
    "hydra/sweeper=dse_optuna",
    "hydra.sweeper.study_name=team",
    "algorithm.mutation.eta=interval(5,40)",
    "hydra.sweeper.n_trials=2",
    "hydra.sweeper.total_trials=3",
]


def on_board(name: str, board: str, command: str) -> list[str]:
    return [sys.executable, "-m", "dse.cluster", "exec", board, f"name={name}", "--", command]


def test_workers_on_a_board_and_here_share_one_study_on_a_server_here(
    cluster_names, tmp_path: Path
) -> None:
    state = up(parse_spec(make_platform(cluster_names("sweep"))))
    if pg.missing():
        pytest.skip(str(pg.missing()))
    server = pg.start(hosts=("127.0.0.1", str(state.head)), clients=(str(state.subnet),))
    try:
        db = server.database()
        # the board's own ~/.pgpass, as each host of a team has: the password on no command line
        pgpass = subprocess.run(
            on_board(state.name, "tb0", "umask 077 && cat > ~/.pgpass"),
            input=f"{state.head}:{server.port}:{db}:{pg.ROLE}:{server.password}\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert pgpass.returncode == 0, pgpass.stderr
        there = [
            *SWEEP,
            f"hydra.sweeper.storage={server.url(db, str(state.head))}",
            "hydra.sweep.dir=/tmp/team-sweep",
        ]
        remote = f"cd {ROOT} && PYTHONPATH={ROOT} {sys.executable} -m dse --multirun " + " ".join(
            f"'{a}'" for a in there
        )
        board = subprocess.Popen(
            on_board(state.name, "tb0", remote),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        here = subprocess.Popen(
            [sys.executable, "-m", "dse", "--multirun", *SWEEP,
             f"hydra.sweeper.storage={server.url(db)}", f"hydra.sweep.dir={tmp_path / 'here'}"],
            cwd=ROOT,
            env={**os.environ, **server.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for worker in (board, here):
            with reaped(worker):
                _, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err[-2000:]
        study = optuna.load_study(
            study_name="team",
            storage=optuna.storages.RDBStorage(
                server.url(db), engine_kwargs={"connect_args": {"password": server.password}}
            ),
        )
        trials = study.trials
        # total_trials holds across the two hosts, and each trial ran once, on one of them
        assert sorted(t.number for t in trials) == [0, 1, 2]
        assert all(t.state == TrialState.COMPLETE for t in trials)
        hosts = {t.user_attrs["worker"].split(":")[0] for t in trials}
        assert hosts == {"tb0", socket.gethostname()}
        run_dirs = [t.user_attrs["run_dir"] for t in trials]
        assert len(set(run_dirs)) == 3
        on_tb0 = [
            d for t, d in zip(trials, run_dirs, strict=True) if "tb0" in t.user_attrs["worker"]
        ]
        assert on_tb0 and all(d.startswith("/tmp/team-sweep/") for d in on_tb0)
        assert not any(Path(d).exists() for d in on_tb0)  # the board's disk, not this machine's
    finally:
        server.stop()
