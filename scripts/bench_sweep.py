"""Sweeps on a PostgreSQL study: one worker against two on a fixed set of trials, and the
sweeper's overhead per trial on PostgreSQL against SQLite.

    python scripts/bench_sweep.py                       # 16 VGG-16 trials of about 5 s each
    python scripts/bench_sweep.py --trials 2 --gens 2   # a smoke run
    PGPASSWORD=... python scripts/bench_sweep.py --server postgresql://USER@HOST:PORT/DB

(a) The same ``--trials`` settings (``algorithm.mutation.eta`` evenly over [5, 40], enqueued
in a new study) are run by one worker, then by two started together, each
``python -m dse --multirun ... hydra/sweeper=dse_optuna`` with ``total_trials`` the number of
settings; it prints both wall times, their ratio (the target: at least 1.7 on two cores) and
whether both completed the same set of settings. (b) One worker's sweeper time per trial
(ask, suggest, checks, attributes, tell: a trial's start-to-complete time less the launch) on
PostgreSQL and on SQLite, medians.

Without ``--server`` it starts a PostgreSQL server of its own as the tests do
(``tests/helpers/postgres.py``: Debian's server, as root through the ``postgres`` user), each
measurement in a new database. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hydra_plugins.dse_optuna_sweeper._storage import open_storage  # noqa: E402
from tests.helpers import postgres as pg  # noqa: E402

STUDY = "bench"
SPACE = "algorithm.mutation.eta=interval(5,40)"


def command(args: argparse.Namespace, url: str, sweep_dir: Path, n: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dse",
        "--multirun",
        f"+net={args.net}",
        f"algorithm.pop_size={args.pop}",
        f"algorithm.n_gen={args.gens}",
        *([f"model_threads={args.threads}"] if args.threads else []),
        "progress=false",
        f"platform={args.platform}",
        "hydra/sweeper=dse_optuna",
        "hydra.sweeper.sampler.seed=0",
        SPACE,
        f"hydra.sweeper.n_trials={n}",
        f"hydra.sweeper.total_trials={n}",
        f"hydra.sweeper.study_name={STUDY}",
        f"hydra.sweeper.storage={url}",
        f"hydra.sweep.dir={sweep_dir}",
    ]


def prepared(url: str, n: int) -> optuna.Study:
    """A new study holding the ``n`` settings, enqueued."""
    study = optuna.create_study(study_name=STUDY, storage=open_storage(url), direction="maximize")
    for i in range(n):
        study.enqueue_trial({"algorithm.mutation.eta": 5 + 35 * i / max(1, n - 1)})
    return study


def workers(args: argparse.Namespace, url: str, count: int, tmp: Path) -> float:
    """Wall seconds of ``count`` workers started together on the study."""
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            command(args, url, tmp / f"w{i}-{uuid.uuid4().hex[:6]}", args.trials),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0 or "Traceback" in err:
            sys.exit(f"a worker failed ({p.returncode}):\n{err[-3000:]}")
    return time.perf_counter() - started


def completed(url: str) -> tuple[list[optuna.trial.FrozenTrial], set[float]]:
    study = optuna.load_study(study_name=STUDY, storage=open_storage(url))
    done = study.get_trials(states=(TrialState.COMPLETE,))
    return done, {round(t.params["algorithm.mutation.eta"], 9) for t in done}


def overhead(trials: list[optuna.trial.FrozenTrial]) -> float:
    """Median sweeper seconds per trial: start-to-complete less the launch."""
    spans = []
    for t in trials:
        assert t.datetime_complete is not None and t.datetime_start is not None
        span = (t.datetime_complete - t.datetime_start).total_seconds()
        spans.append(span - float(t.user_attrs["seconds"]["launch"]))
    return statistics.median(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", default="vgg16")
    parser.add_argument("--platform", default="jetson_xavier_nx_x8")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--pop", type=int, default=50)
    parser.add_argument("--gens", type=int, default=600)
    parser.add_argument(
        "--threads",
        type=int,
        help="model_threads of every worker (default: dse's, every core "
        "when the machine is idle, so one worker alone already uses both)",
    )
    parser.add_argument(
        "--server",
        help="a PostgreSQL database URL without its password (PGPASSWORD or ~/.pgpass gives "
        "it); its study 'bench' is dropped before each measurement. Default: a server of "
        "this script's own",
    )
    args = parser.parse_args()

    server = None
    if args.server is None:
        why = pg.missing()
        if why:
            sys.exit(why)
        server = pg.start()
        os.environ.update(server.env)

    def fresh() -> str:
        if server is not None:
            return server.url(server.database())
        with contextlib.suppress(KeyError):  # no study of that name yet
            optuna.delete_study(study_name=STUDY, storage=open_storage(args.server))
        return str(args.server)

    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            walls: dict[int, float] = {}
            sets: dict[int, set[float]] = {}
            runs: dict[int, list[optuna.trial.FrozenTrial]] = {}
            for count in (1, 2):
                url = fresh()
                prepared(url, args.trials)
                walls[count] = workers(args, url, count, tmp)
                runs[count], sets[count] = completed(url)
            sqlite = f"sqlite:///{tmp / 'bench.db'}"
            prepared(sqlite, args.trials)
            workers(args, sqlite, 1, tmp)
            lite, _ = completed(sqlite)
    finally:
        if server is not None:
            server.stop()

    report(args, walls, sets, runs, lite, print)


def report(
    args: argparse.Namespace,
    walls: dict[int, float],
    sets: dict[int, set[float]],
    runs: dict[int, list[optuna.trial.FrozenTrial]],
    lite: list[optuna.trial.FrozenTrial],
    out: Callable[[str], None],
) -> None:
    ratio = walls[1] / walls[2]
    out(
        f"{args.net} on {args.platform}, population {args.pop} x {args.gens} generations, "
        f"{args.trials} settings (enqueued), {os.cpu_count()} CPUs"
    )
    out(
        f"(a) PostgreSQL study: 1 worker {walls[1]:.1f} s, 2 workers {walls[2]:.1f} s: "
        f"{ratio:.2f}x (target >= 1.7: {'met' if ratio >= 1.7 else 'NOT met'}); completed "
        f"{len(sets[1])} and {len(sets[2])} settings, "
        f"{'the same set' if sets[1] == sets[2] else 'DIFFERENT sets'}"
    )
    out(
        f"(b) sweeper per trial (median, 1 worker): PostgreSQL {overhead(runs[1]) * 1e3:.1f} ms,"
        f" SQLite {overhead(lite) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
