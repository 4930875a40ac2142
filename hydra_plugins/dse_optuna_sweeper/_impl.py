"""The sweep loop: ask the study for a batch of trials, launch them as jobs, tell the results."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf
from optuna.trial import Trial, TrialState

from dse.cli import run_context
from dse.errors import DseError
from hydra_plugins.dse_optuna_sweeper import _report
from hydra_plugins.dse_optuna_sweeper._space import (
    SearchSpace,
    conditional,
    parse,
    same_space,
)
from hydra_plugins.dse_optuna_sweeper._storage import (
    Options,
    dashboard_install,
    default_url,
    masked,
    one_at_a_time,
    open_storage,
    retry,
    with_driver,
)
from hydra_plugins.dse_optuna_sweeper._study import (  # noqa: F401 - tests use _impl's names
    Heartbeats,
    Outcome,
    default_study_name,
    enumerable,
    lookup,
    make_sampler,
    one_line,
    outcome,
    safe_name,
    suggest,
    with_metric_names,
)

Direction = Literal["maximize", "minimize"]
DIRECTIONS: tuple[Direction, ...] = ("maximize", "minimize")


def as_list(value: Any) -> list[Any]:
    if OmegaConf.is_list(value) or isinstance(value, list | tuple):
        return list(value)
    return [value]


def objectives_and_directions(objective: Any, direction: Any) -> tuple[list[str], list[Direction]]:
    """The objective keys and one direction for each (a single direction applies to all)."""
    keys = [str(k) for k in as_list(objective)]
    dirs = [str(d).lower() for d in as_list(direction)]
    if not keys or len(set(keys)) != len(keys):
        raise DseError(f"hydra.sweeper.objective={keys}: name each objective key once")
    if len(dirs) == 1:
        dirs = dirs * len(keys)
    if len(dirs) != len(keys):
        raise DseError(
            f"hydra.sweeper.direction has {len(dirs)} values for {len(keys)} objectives "
            f"({', '.join(keys)}): give one direction per objective"
        )
    return keys, [_direction(d) for d in dirs]


def _direction(text: str) -> Direction:
    for d in DIRECTIONS:
        if d == text:
            return d
    raise DseError(f"hydra.sweeper.direction={text}: choose maximize or minimize")


class TimedTask:
    """The task function, timed: seconds per job number (kept when jobs run in this process)."""

    def __init__(self, task: TaskFunction) -> None:
        self.task = task
        self.seconds: dict[int, float] = {}

    def __call__(self, cfg: DictConfig) -> Any:
        from hydra.core.hydra_config import HydraConfig

        started = time.perf_counter()
        try:
            return self.task(cfg)
        finally:
            self.seconds[int(HydraConfig.get().job.num)] = time.perf_counter() - started


class SweeperImpl:
    """See :class:`hydra_plugins.dse_optuna_sweeper.config.DseOptunaSweeperConf`."""

    def __init__(
        self,
        sampler: Any,
        objective: Any,
        direction: Any,
        n_trials: int,
        n_jobs: int,
        total_trials: int | None,
        study_name: str | None,
        storage: str | None,
        params: Mapping[str, str] | None,
        password_file: str | None = None,
        connect_timeout: int = 10,
        heartbeat_interval: int | None = 60,
        grace_period: int | None = None,
        retry_failed: int = 0,
        conditions: Mapping[str, str] | None = None,
    ) -> None:
        self.sampler_conf = sampler
        self.objective, self.direction = objective, direction
        self.n_trials, self.n_jobs, self.total_trials = n_trials, n_jobs, total_trials
        self.study_name, self.storage = study_name, storage
        self.params = {str(k): str(v) for k, v in (params or {}).items()}
        self.conditions = {str(k): str(v) for k, v in (conditions or {}).items()}
        self.options = Options(
            password_file=password_file,
            connect_timeout=connect_timeout,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            retry_failed=retry_failed,
        )
        self.beats: Heartbeats | None = None
        self.storage_handle: Any = None
        self.exhausted = False  # the sampler has tried every setting (brute force)
        self.job_idx = 0
        self.completed = 0  # trials this command ran that completed
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.task = TimedTask(task_function)
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=self.task, config=config
        )
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()

    def sweep(self, arguments: list[str]) -> Any:
        try:
            return self._sweep(arguments)
        except DseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)

    def _open(self, space: SearchSpace) -> tuple[optuna.Study, str, list[str]]:
        if self.n_trials < 0 or self.n_jobs < 1:
            raise DseError("hydra.sweeper.n_trials must be 0 or more and n_jobs 1 or more")
        if self.options.retry_failed < 0 or (self.options.heartbeat_interval or 0) < 0:
            raise DseError("hydra.sweeper.retry_failed and heartbeat_interval must be 0 or more")
        if self.options.retry_failed and not self.options.heartbeat_interval:
            raise DseError(
                "hydra.sweeper.retry_failed needs heartbeats to notice a dead worker: give "
                "hydra.sweeper.heartbeat_interval too"
            )
        conditional(space, self.conditions)
        keys, dirs = objectives_and_directions(self.objective, self.direction)
        name = self.study_name or default_study_name(self.config, space, keys, dirs)
        root = Path(str(self.config.hydra.runtime.cwd))
        url = self.storage or default_url(safe_name(name), root)
        sampler = make_sampler(self.sampler_conf)
        enumerable(space, sampler)  # before the storage: a refused sweep leaves no file
        storage = open_storage(url, self.options)
        self.storage_handle = storage
        try:
            study = retry(
                lambda: optuna.create_study(
                    storage=storage,
                    sampler=sampler,
                    study_name=name,
                    directions=dirs,
                    load_if_exists=True,
                )
            )
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy and driver errors are many classes
            raise DseError(
                f"cannot open study '{name}' in {masked(url)}: {one_line(exc)} (give another "
                "hydra.sweeper.storage)"
            ) from None
        have = [d.name.lower() for d in study.directions]
        stored = study.user_attrs.get("objectives")
        if have != dirs or (stored is not None and stored != keys):
            raise DseError(
                f"study '{name}' in {masked(url)} optimises {stored or '?'} "
                f"({', '.join(have)}), not {keys} ({', '.join(dirs)}): give another "
                "hydra.sweeper.study_name"
            )
        if stored is None:
            retry(lambda: study.set_user_attr("objectives", keys))
            retry(lambda: study.set_user_attr("directions", dirs))
        same_space(study, name, masked(url), space)
        if storage is not None and self.options.heartbeat_interval:
            self.beats = Heartbeats(storage, int(self.options.heartbeat_interval))
        return study, masked(url), keys

    def _ask(self, study: optuna.Study, space: SearchSpace) -> tuple[Trial, list[str], float]:
        """A new trial (or a waiting one: enqueued, or a dead worker's to retry), its keys
        sampled in order, a conditional key only where it applies."""
        started = time.perf_counter()
        with warnings.catch_warnings():  # heartbeats outside Study.optimize: kept by Heartbeats
            warnings.simplefilter("ignore")
            if self.beats is not None:
                retry(partial(optuna.storages.fail_stale_trials, study))
            trial = retry(study.ask)
        if self.beats is not None:
            self.beats.add(trial._trial_id)
        values: dict[str, Any] = {}
        for n in space.order():
            if space.applies(n, values):
                values[n] = retry(partial(suggest, trial, n, space.params[n].distribution))
        overrides = space.overrides(values)
        attrs: dict[str, Any] = {"overrides": overrides, "worker": self.worker}
        if self.beats is not None:  # a dead worker's trial, run again: linked to it
            frozen = retry(partial(study._storage.get_trial, trial._trial_id))
            with warnings.catch_warnings():  # experimental: chosen, not a surprise
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                repeats = optuna.storages.RetryFailedTrialCallback.retried_trial_number(frozen)
            if repeats is not None:
                attrs["retry_of"] = repeats
        for key, value in attrs.items():
            retry(partial(trial.set_user_attr, key, value))
        return trial, overrides, time.perf_counter() - started

    def _reused(
        self, study: optuna.Study, trial: Trial, overrides: list[str], keys: list[str]
    ) -> bool:
        """Whether the study already completed a trial of the same settings (the same sampled
        values and the same overrides, the command's fixed ones included: a worker started
        with another platform or budget runs its own): then ``trial`` gets its values (and
        its run directory), and nothing runs again."""
        params = trial.params
        done = retry(lambda: study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        twin = next(
            (
                t
                for t in done
                if t.params == params
                and t.user_attrs.get("overrides") == overrides
                and t.number != trial.number
            ),
            None,
        )
        if twin is None:
            return False
        for key in ("run_dir", "result"):
            if key in twin.user_attrs:
                retry(partial(trial.set_user_attr, key, twin.user_attrs[key]))
        retry(partial(trial.set_user_attr, "reused_from", twin.number))
        self._tell(study, trial, values=twin.values)
        self._done(trial)
        self.completed += 1
        shown = ", ".join(f"{k}={v:.6g}" for k, v in zip(keys, twin.values, strict=True))
        print(f"trial {trial.number}: {shown}, the settings of trial {twin.number} (reused)")
        return True

    def _tell(self, study: optuna.Study, trial: Trial, **outcome: Any) -> None:
        """Record the trial's end. Brute force, its last setting told, asks the study to stop,
        which Optuna refuses outside ``Study.optimize`` once the trial is recorded: then this
        sweep stops (:attr:`exhausted`)."""
        try:
            retry(lambda: study.tell(trial, skip_if_finished=True, **outcome))
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            self.exhausted = True

    def _done(self, trial: Trial) -> None:
        if self.beats is not None:
            self.beats.remove(trial._trial_id)

    def _fail(self, study: optuna.Study, trial: Trial, reason: str) -> None:
        retry(lambda: trial.set_user_attr("fail_reason", reason))
        self._tell(study, trial, state=TrialState.FAIL)
        self._done(trial)
        print(f"trial {trial.number} failed: {reason}", file=sys.stderr)

    def _valid(self, overrides: list[str]) -> str | None:
        """Why a trial's config does not compose, or None."""
        loader = self.hydra_context.config_loader
        try:
            loader.load_sweep_config(master_config=self.config, sweep_overrides=list(overrides))
        except Exception as exc:  # noqa: BLE001 - composition errors are many classes
            return one_line(exc)
        return None

    def _record(
        self,
        study: optuna.Study,
        trial: Trial,
        ret: JobReturn,
        keys: list[str],
        spent: float,
        launch: float,
    ) -> None:
        started = time.perf_counter()
        got = outcome(ret, keys)
        # each attribute is one commit: the run directory, the rest of the result as one
        run_dir = got.attrs.get("run_dir")
        if run_dir is None and ret.hydra_cfg is not None:
            out = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir", default=None)
            if out and Path(out).is_dir():
                run_dir = str(out)
        attrs: dict[str, Any] = {} if run_dir is None else {"run_dir": str(run_dir)}
        result = {k: v for k, v in got.attrs.items() if k != "run_dir"}
        if result:
            attrs["result"] = result
        if got.traceback:
            with open(self.sweep_dir / "errors.log", "a", encoding="utf-8") as log:
                log.write(f"trial {trial.number} ({' '.join(ret.overrides or [])}):\n")
                log.write(got.traceback + "\n")
        # time in the sweeper itself (ask, suggest, check, record), in the launcher per job, and
        # in the task function (the run)
        attrs["seconds"] = {
            "sweeper": round(spent + time.perf_counter() - started, 6),
            "launch": round(launch, 6),
        }
        job = OmegaConf.select(ret.hydra_cfg, "hydra.job.num") if ret.hydra_cfg else None
        if job is not None and int(job) in self.task.seconds:
            attrs["seconds"]["task"] = round(self.task.seconds.pop(int(job)), 6)
        try:
            for key, value in attrs.items():
                retry(partial(trial.set_user_attr, key, value))
        except optuna.exceptions.UpdateFinishedTrialError:
            # this worker went silent longer than the grace period (suspended, its host's clock
            # or network stalled): another failed the trial meanwhile, and may be rerunning it
            self._done(trial)
            print(
                f"trial {trial.number} was failed meanwhile by another worker (no heartbeat "
                "within hydra.sweeper.grace_period): its result is not recorded",
                file=sys.stderr,
            )
            return
        if got.values is None:
            self._fail(study, trial, str(got.reason))
            return
        self._tell(study, trial, values=got.values)
        self._done(trial)
        self.completed += 1
        shown = ", ".join(f"{k}={v:.6g}" for k, v in zip(keys, got.values, strict=True))
        print(f"trial {trial.number}: {shown} -> {attrs.get('run_dir', '?')}")

    def _room(self, study: optuna.Study, size: int) -> int:
        """How many of ``size`` trials the study takes (``total_trials``: trials run, running
        or done; an enqueued trial waiting for a worker is one of those to come, and a failed
        trial run again counts once, as its retry)."""
        if self.total_trials is None:
            return size
        trials = retry(lambda: study.get_trials(deepcopy=False))
        with warnings.catch_warnings():  # experimental: chosen, not a surprise
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            repeated = {
                optuna.storages.RetryFailedTrialCallback.retried_trial_number(t) for t in trials
            }
        held = sum(
            t.state != TrialState.WAITING
            and not (t.state == TrialState.FAIL and t.number in repeated)
            for t in trials
        )
        return max(0, min(size, self.total_trials - held))

    def _batch(
        self, study: optuna.Study, space: SearchSpace, keys: list[str], size: int
    ) -> tuple[int, Sequence[JobReturn] | None]:
        """Ask for up to ``size`` trials (as many as ``total_trials`` leaves: counted and asked
        for by one worker at a time), run them as one launch, tell their results; how many
        were asked for, and the launch's results."""
        batch: list[tuple[Trial, list[str], float]] = []
        asked: list[tuple[Trial, list[str], float]] = []
        try:
            with one_at_a_time(self.storage_handle, study.study_name):
                size = self._room(study, size)
                for _ in range(size):
                    asked.append(self._ask(study, space))
            for trial, overrides, spent in asked:
                if self._reused(study, trial, overrides, keys):
                    continue
                # a config that does not compose stops the launcher's whole batch: check each
                # job of a batch first (a batch of one fails alone, without composing twice)
                bad = self._valid(overrides) if size > 1 else None
                if bad:
                    self._fail(study, trial, bad)
                else:
                    batch.append((trial, overrides, spent))
            if not batch:
                return size, None
            launched = time.perf_counter()
            try:
                results = self.launcher.launch(
                    [ov for _, ov, _ in batch], initial_job_idx=self.job_idx
                )
            except Exception as exc:
                self.job_idx += len(batch)
                for trial, _, _ in batch:
                    self._fail(study, trial, one_line(exc))
                if len(batch) == 1:
                    return size, None
                raise
        except (KeyboardInterrupt, SystemExit):
            # Ctrl-C: a run stops at its next generation with complete outputs and exits 130
            for trial, _, _ in asked:  # those not recorded yet (reused or refused ones are)
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    self._fail(study, trial, "interrupted")
            print("sweep interrupted: run the same command to continue the study", file=sys.stderr)
            raise
        self.job_idx += len(batch)
        launch = (time.perf_counter() - launched) / len(batch)
        for (trial, _, spent), ret in zip(batch, results, strict=True):
            self._record(study, trial, ret, keys, spent, launch)
        return size, results

    def _sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        space = parse(arguments, self.params)
        study, url, keys = self._open(space)
        try:
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")
        except OSError as exc:
            raise DseError(
                f"cannot write to hydra.sweep.dir={self.sweep_dir} ({exc.strerror or exc}): "
                "choose another hydra.sweep.dir"
            ) from None
        with_metric_names(study, keys)
        watch = (
            ""
            if url == "memory"
            else f"; watch it with optuna-dashboard ({dashboard_install(url)}): "
            f"optuna-dashboard {with_driver(url)}"
        )
        held = len(study.get_trials(deepcopy=False))
        print(f"study '{study.study_name}' in {url}: {held} trials so far{watch}")
        try:
            return self._trials(study, space, keys, url)
        finally:
            if self.beats is not None:
                self.beats.close()

    def _trials(
        self, study: optuna.Study, space: SearchSpace, keys: list[str], url: str
    ) -> list[Sequence[JobReturn]]:
        returns: list[Sequence[JobReturn]] = []
        done = 0
        while done < self.n_trials:
            asked, results = self._batch(study, space, keys, min(self.n_jobs, self.n_trials - done))
            if not asked:
                held = len(retry(lambda: study.get_trials(deepcopy=False)))
                print(f"the study holds {held} trials (hydra.sweeper.total_trials)")
                break
            done += asked
            if results is not None:
                returns.append(results)
            if self.exhausted:
                print("every setting of the search space has been tried (brute force)")
                break
        report = _report.summarize(study, keys, space, url)
        print(_report.text(report))
        _report.write(report, self.sweep_dir)
        # failed trials are results of the sweep (recorded in the study), not a failed command,
        # unless no trial completed: then the command gave nothing
        if done and not self.completed:
            raise DseError(
                f"no trial this command ran completed ({done} failed, the reasons above): fix "
                "what they name and run it again"
            )
        run_context().failures_are_results()
        return returns
