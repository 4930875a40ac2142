"""The study's side of a sweep: its sampler, its name, how a trial's result becomes its values,
and the heartbeats of this worker's running trials."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import threading
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import optuna
from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)
from optuna.trial import Trial

from dse.cli import one_line as cause_lines
from dse.errors import DseError
from hydra_plugins.dse_optuna_sweeper._space import (
    SearchSpace,
    describe,
)
from hydra_plugins.dse_optuna_sweeper._storage import (
    retry,
)
from hydra_plugins.dse_optuna_sweeper.config import SAMPLERS


def make_sampler(conf: Any) -> optuna.samplers.BaseSampler:
    """The Optuna sampler a ``SamplerConf`` names."""
    name = str(conf.name)
    if name not in SAMPLERS:
        raise DseError(f"unknown sampler '{name}': choose one of {', '.join(SAMPLERS)}")
    options = OmegaConf.to_container(conf.options) if OmegaConf.is_config(conf.options) else {}
    kwargs = dict(cast("dict[str, Any]", options or {}))  # SamplerConf.options: a dict
    if conf.seed is not None:
        kwargs["seed"] = int(conf.seed)
    try:
        with warnings.catch_warnings():  # chosen by name: not a surprise (bruteforce, qmc)
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return getattr(optuna.samplers, SAMPLERS[name])(**kwargs)
    except (TypeError, ValueError) as exc:
        raise DseError(f"sampler {name}: {exc}") from None


def enumerable(space: SearchSpace, sampler: optuna.samplers.BaseSampler) -> None:
    """Refuse in one line a continuous parameter (an interval without a step) when the sampler
    tries every value (brute force): Optuna would fail on the first trial."""
    if not isinstance(sampler, optuna.samplers.BruteForceSampler):
        return
    for p in space.params.values():
        d = p.distribution
        if isinstance(d, FloatDistribution) and d.step is None:
            raise DseError(
                "hydra/sweeper/sampler=bruteforce tries every value, but "
                f"{p.key}={describe(distribution_to_json(d))} is continuous: give it a step "
                "(range(start,stop,step)) or choices (choice(a,b,...)), or choose another "
                "sampler"
            )


def default_study_name(
    config: DictConfig, space: SearchSpace, keys: Sequence[str], dirs: Sequence[str]
) -> str:
    """``<net>-<digest>``: the same command (fixed settings, search space, objectives) gives
    the same study, so running it again continues it."""
    ident = {
        "fixed": sorted(space.fixed),
        "params": {n: distribution_to_json(d) for n, d in sorted(space.distributions.items())},
        "objectives": keys,
        "directions": dirs,
    }
    digest = hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8]
    net = OmegaConf.select(config, "net.name", default=None)
    return f"{net or 'sweep'}-{digest}"


def safe_name(name: str) -> str:
    """A study name as a file name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "study"


def lookup(result: Mapping[str, Any], key: str) -> Any:
    """``result[key]``, or the nested value a dotted key names."""
    if key in result:
        return result[key]
    node: Any = result
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def one_line(exc: BaseException) -> str:
    """The exception's class and the first line of it and of each of its causes."""
    text = f"{type(exc).__name__}: {cause_lines(exc)}"
    if "could not be converted to Integer" in text:
        text += " (sweep whole numbers with tag(int, interval(...)) or range(...))"
    return text


@dataclass
class Outcome:
    """What a job's return means for its trial."""

    values: list[float] | None = None  # None: the trial failed
    reason: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)  # user attributes to record
    traceback: str | None = None


def outcome(ret: JobReturn, keys: Sequence[str]) -> Outcome:
    """The trial's values, read from the job's return value (``keys`` of its mapping), or why
    it failed: the job raised, returned ``status != ok`` (with its ``reason``), or lacked a
    key."""
    try:
        result = ret.return_value
    except Exception as exc:  # noqa: BLE001 - the job's own error, whatever its class
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return Outcome(reason=one_line(exc), traceback=tb)
    if not isinstance(result, Mapping):
        if len(keys) == 1 and isinstance(result, int | float) and not isinstance(result, bool):
            result = {keys[0]: result}
        else:
            return Outcome(reason=f"the job returned {result!r:.80}, not a mapping")
    attrs = {
        k: v
        for k, v in result.items()
        if k not in ("status", "reason") and isinstance(v, str | int | float | bool)
    }
    status = result.get("status", "ok")
    if status != "ok":
        return Outcome(reason=str(result.get("reason") or f"status {status}"), attrs=attrs)
    values = []
    for key in keys:
        try:
            value = lookup(result, key)
        except KeyError:
            return Outcome(
                reason=f"the job returned no '{key}' (it has {', '.join(map(str, result))})",
                attrs=attrs,
            )
        try:
            number = float(value)
        except (TypeError, ValueError):
            return Outcome(reason=f"{key}={value!r:.60} is not a number", attrs=attrs)
        if not math.isfinite(number):
            return Outcome(reason=f"{key} is {number}", attrs=attrs)
        values.append(number)
    return Outcome(values=values, attrs=attrs)


def suggest(trial: Trial, name: str, dist: Any) -> Any:
    """Sample one parameter through the public Trial API."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, list(dist.choices))
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    raise TypeError(f"unsupported distribution {dist!r}")  # pragma: no cover


def with_metric_names(study: optuna.Study, keys: list[str]) -> None:
    """Name the study's values after the objective keys (shown by optuna-dashboard)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if study.metric_names != keys:
            retry(lambda: study.set_metric_names(keys))


class Heartbeats:
    """This worker's running trials, each beaten in the storage every ``interval`` seconds by
    a thread of its own (Optuna beats only inside ``Study.optimize``; the sweeper asks and
    tells): a worker that dies stops beating, and the next worker to ask fails its trials."""

    def __init__(self, storage: Any, interval: int) -> None:
        self.storage, self.interval = storage, interval
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="dse-heartbeats", daemon=True)
        self.thread.start()

    def add(self, trial_id: int) -> None:
        retry(partial(self.storage.record_heartbeat, trial_id))
        with self.lock:
            self.ids.add(trial_id)

    def remove(self, trial_id: int) -> None:
        with self.lock:
            self.ids.discard(trial_id)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()

    def _beat(self) -> None:
        while not self.stopped.wait(self.interval):
            with self.lock:
                ids = sorted(self.ids)
            for trial_id in ids:
                try:
                    retry(partial(self.storage.record_heartbeat, trial_id))
                except Exception as exc:  # noqa: BLE001 - a lost beat: the next one may pass
                    print(f"heartbeat of a trial not recorded: {one_line(exc)}", file=sys.stderr)
