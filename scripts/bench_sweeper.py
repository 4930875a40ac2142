"""Time the Optuna sweeper's overhead per trial against the run itself, on tiny runs.

    python scripts/bench_sweeper.py                    # 10 tiny AlexNet trials on localhost
    python scripts/bench_sweeper.py --trials 20 --gens 5 --sampler nsga2

Runs one sweep (``python -m dse --multirun hydra/sweeper=dse_optuna``) into a temporary SQLite
study, then reads each trial's times back from the study and prints medians per trial:

* run: the task function (``python -m dse``'s main, start to end);
* Hydra job: the launcher's time per job beyond the run (composing the job's config, its
  directory, ``.hydra/`` files, logging);
* sweeper: ask, suggest, the config check, user attributes (``seconds.sweeper``), plus the
  ``tell`` (the rest of the trial's start-to-complete time);
* and once per sweep: process start-up (imports, composing, opening the study) and the final
  report.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", default="alexnet")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--pop", type=int, default=20)
    parser.add_argument("--gens", type=int, default=3)
    parser.add_argument("--sampler", default="tpe")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        command = [
            sys.executable,
            "-m",
            "dse",
            "--multirun",
            f"+net={args.net}",
            f"algorithm.pop_size={args.pop}",
            f"algorithm.n_gen={args.gens}",
            "progress=false",
            "platform=localhost",
            "hydra/sweeper=dse_optuna",
            f"hydra/sweeper/sampler={args.sampler}",
            "hydra.sweeper.sampler.seed=0",
            "chromosome=choice(naive,advanced,vertical)",
            "chromosome.splits=range(1,3)",
            "algorithm.mutation.eta=interval(5,40)",
            f"hydra.sweeper.n_trials={args.trials}",
            "hydra.sweeper.study_name=bench",
            f"hydra.sweeper.storage={url}",
            f"hydra.sweep.dir={Path(tmp) / 'sweep'}",
        ]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        total = time.perf_counter() - started
        if "Traceback" in done.stderr:
            sys.exit(done.stderr)
        trials = optuna.load_study(study_name="bench", storage=url).get_trials(
            states=(TrialState.COMPLETE,)
        )
    if not trials:
        sys.exit("no trial completed:\n" + done.stderr)
    run = [t.user_attrs["seconds"]["task"] for t in trials]
    launch = [t.user_attrs["seconds"]["launch"] for t in trials]
    job = [a - b for a, b in zip(launch, run, strict=True)]
    span = [(t.datetime_complete - t.datetime_start).total_seconds() for t in trials]
    sweeper = [a - b for a, b in zip(span, launch, strict=True)]
    once = total - sum(span)
    med = statistics.median
    print(
        f"{args.net}, population {args.pop} x {args.gens} generations, {args.sampler}: "
        f"{len(trials)} of {args.trials} trials complete in {total:.1f} s"
    )
    print(
        f"per trial (median): run {med(run):.3f} s, Hydra job {med(job):.3f} s, "
        f"sweeper {med(sweeper):.3f} s ({100 * med(sweeper) / med(run):.1f} % of the run)"
    )
    print(f"once per sweep: start-up and report {once:.1f} s")


if __name__ == "__main__":
    main()
