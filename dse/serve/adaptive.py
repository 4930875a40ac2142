"""A served plan that follows its hardware: measured against the model frame by frame, searched
again when the boards or links change, and swapped for a better plan without losing a frame.

:meth:`Adaptive.start` deploys a mapping (``WORKDIR/plan-0``) and serves it
(:class:`~dse.serve.deployment.Deployment`); ``run``, ``submit`` and ``stream`` are the
deployment's. Every rank's compute on every frame and every frame's completion go to a
:class:`~dse.serve.monitor.Monitor`; a controller thread looks at its window every
:attr:`Settings.check_s` and applies :mod:`dse.serve.drift`:

1. a plan's first window of frames (and first :data:`WARMUP_S`) warms it up; the next full
   window sets the reference ratios (measured over predicted): the period's for this plan, each
   device's compute the first time the device is judged, whatever the plan;
2. a drift seen on the window and on its newest half alike, for :attr:`Settings.confirm_s` (a
   change, not a passing spell), is explained by new conditions (devices' speeds, the network's
   bandwidth: :func:`~dse.serve.drift.rescaled`) fitted on the newest half (the frames after the
   change), and the model is put under them
   (:meth:`~models_analytical.model.AnalyticalModel.under`);
3. a search under them (NSGA-II on period and latency, :attr:`Settings.budget_s` seconds,
   starting from the usual seeds built for the rescaled devices) looks for a plan of a smaller
   period; the served plan is its incumbent;
4. a plan predicted at most ``1 - margin`` of the served plan's period is *clearly better*: with
   ``mode="replan"`` it is deployed (``WORKDIR/plan-N``, shipped to the hosts that have disks of
   their own while the old plan still serves), then the service pauses: frames handed over from
   now wait, the frames in the old plan finish, the old ranks stop, the new ones start and load,
   and the waiting frames go to them. No frame is lost, none is run twice, and each caller's
   outputs come in the order of its frames. With ``mode="advise"`` the plan is only logged.

Where boards are reached by ssh and the conditions hold the network slower than at the
start, each board's port is probed from here every :attr:`Settings.probe_s`
(:mod:`dse.serve.probe`): once every port is back to its rate at the start, the plan is searched
again for the calibrated network. A plan that stopped crossing the slow port cannot see it
recover.

Every decision is a line of ``WORKDIR/decisions.jsonl`` (and of :attr:`Adaptive.decisions`),
with what was measured and predicted: ``staged``, ``probed`` (the ports' rates at the start;
later, factors that differ from the conditions), ``reference``, ``drift`` (the ratios and the
conditions fitted), ``unexplained`` (a drift neither a device nor the network explains: the next
window becomes the reference), ``keep`` (no clearly better plan), ``advise``, ``switch`` (the
new plan serving: its search, deploy, ship and pause times), ``failed`` (a new plan that would
not start: the old plan is started again). Two plans never run at once: a board's memory is
sized for one plan, and an emulated cluster runs one run at a time.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chromosomes import CHROMOSOMES
from dse.errors import DseError
from dse.mapping import Mappings
from dse.net import Net
from dse.runtime.launch.mpiexec import Launcher
from dse.serve.decisions import (
    by_rank,
    conditions_of,
    figures,
    logged,
    period_s,
    rounded,
)
from dse.serve.deployment import (
    IN_FLIGHT,
    MAX_IN_FLIGHT,
    Deployment,
    ServeError,
    in_order,
    platform_file,
)
from dse.serve.drift import THRESHOLD, Drift, Expected, Reference, drift, rescaled
from dse.serve.monitor import Monitor, Window
from dse.serve.plans import Plans
from models_analytical.conditions import Conditions
from models_analytical.model import AnalyticalModel

LOG = logging.getLogger("dse")
MODES = ("replan", "advise")
#: A new plan is not judged in its first seconds (nor its first window of frames).
WARMUP_S = 1.0
#: Probes of a port kept: the fastest of them is the port's rate (a probe reads a port slower
#: than it is when its board's CPU is busy, never faster).
PROBES_KEPT = 3
#: A probe's factor is taken as at most this (its rate at the start may have read low).
PROBE_CAP = 1.5


@dataclass(frozen=True)
class Settings:
    """How the service watches and re-plans (the module's docstring)."""

    mode: str = "replan"  # replan | advise (log the better plan, keep serving the old)
    window: int = 8  # frames the medians are taken over
    threshold: float = THRESHOLD  # relative drift of a ratio from its reference
    margin: float = 0.15  # a new plan's predicted period at most (1 - margin) of the served
    budget_s: float = 1.0  # the re-plan search's time
    pop_size: int = 48
    chromosome: str = "advanced"  # vertical | naive | advanced
    check_s: float = 0.2  # how often the controller looks at the window
    watch: bool = True  # False: no drift is looked for; only Adaptive.adapt re-plans
    confirm_s: float = 1.0  # a drift is acted on once it has lasted this long
    probe_s: float = 10.0  # a slow network: boards' ports probed this often (0: never)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise DseError(f"mode={self.mode!r} is not one of {', '.join(MODES)}")
        if self.chromosome not in CHROMOSOMES:
            raise DseError(f"chromosome={self.chromosome!r} is not one of {', '.join(CHROMOSOMES)}")
        if self.window < 4:
            raise DseError(f"window={self.window} is too short: give at least 4 frames")
        if not 0 < self.threshold < 1 or not 0 <= self.margin < 1:
            raise DseError("threshold must be in (0, 1) and margin in [0, 1)")
        if not isinstance(self.window, int) or not isinstance(self.pop_size, int):
            raise DseError("window and pop_size must be whole numbers")
        if self.pop_size < 2:
            raise DseError(f"pop_size={self.pop_size}: the search needs at least 2")
        for name in ("budget_s", "check_s"):
            if not getattr(self, name) > 0:  # NaN too
                raise DseError(f"{name}={getattr(self, name)} must be a number of seconds above 0")
        for name in ("confirm_s", "probe_s"):
            if not getattr(self, name) >= 0:
                raise DseError(f"{name}={getattr(self, name)} must be 0 or more seconds")


@dataclass
class Served:
    """The plan being served."""

    mapping: Mappings
    directory: Path
    deployment: Deployment
    expected: Expected
    monitor: Monitor
    reference: Reference | None = None
    since: float = field(default_factory=time.monotonic)  # serving since (monotonic s)
    suspect: float | None = None  # a drift seen since (monotonic s), not yet acted on


@dataclass
class _Frame:
    outer: Future
    sent_s: float
    served: Served


@dataclass
class Adaptive:
    """A served plan that re-plans itself (the module's docstring); make one with
    :meth:`start`."""

    net: Net
    model: AnalyticalModel  # under the calibrated (nominal) conditions
    platform: str | Mapping[str, Any]
    workdir: Path
    settings: Settings
    in_flight: int
    launcher: Launcher
    conditions: Conditions = field(default_factory=Conditions)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._t0 = time.monotonic()
        self._gate = threading.Condition()  # frames wait on it while the plan is swapped
        self._paused = False
        self._outstanding = 0
        self._stop = threading.Event()
        self._adapting = threading.Lock()  # one search and switch at a time
        self._served: Served | None = None
        self.plans = Plans(self.net, self.model.platform, self.launcher, self.workdir)
        self._controller: threading.Thread | None = None
        self._rates: dict[str, float] = {}  # each board's port (B/s) as serving started
        self._device_ref: dict[str, float] = {}  # each device's compute ratio, first judged
        self._probes: dict[str, deque[float]] = {}  # each port's last factors, since a drift
        self._forgetting: list[threading.Thread] = []  # replaced plans leaving the hosts
        self.error: str | None = None

    # --- starting -----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        net: Net,
        model: AnalyticalModel,
        mapping: Mappings,
        workdir: Path | str,
        platform: str | Mapping[str, Any],
        settings: Settings | None = None,
        in_flight: int = IN_FLIGHT,
    ) -> Adaptive:
        """Deploy mapping 0 of ``mapping`` in ``workdir/plan-0`` over ``platform`` (a
        platform file's name or path, or its contents: the platform ``model`` was built
        for) and serve it; returns once it serves."""
        if not 1 <= in_flight <= MAX_IN_FLIGHT:
            raise DseError(
                f"in_flight={in_flight} is out of range: give 1 to {MAX_IN_FLIGHT} frames"
            )
        workdir = Path(workdir).expanduser().absolute()
        workdir.mkdir(parents=True, exist_ok=True)
        cfg = platform_file(platform) if isinstance(platform, str) else platform
        from dse.cluster import launcher_for

        self = cls(
            net, model, platform, workdir, settings or Settings(), in_flight, launcher_for(cfg)
        )
        first = mapping.take(slice(0, 1))
        directory = self.plans.deploy(first)
        t0 = time.monotonic()
        if self.plans.stage(directory):
            self._log("staged", hosts=self.plans.hosts, seconds=round(time.monotonic() - t0, 3))
        self._rates = self.plans.port_rates(repeats=3) if self.settings.probe_s > 0 else {}
        if self._rates:
            self._log("probed", mbit={b: round(r * 8e-6, 1) for b, r in self._rates.items()})
        self.plans.ship(directory)
        self._served = self._start_plan(first, self.conditions, directory)
        period_ms = self._served.expected.period_s * 1e3
        self._log("start", plan=self._served.directory.name, period_ms=period_ms)
        if self.settings.watch:
            self._controller = threading.Thread(target=self._control, daemon=True, name="dse-adapt")
            self._controller.start()
        return self

    def _start_plan(
        self, mapping: Mappings, conditions: Conditions, directory: Path | None = None
    ) -> Served:
        directory = directory or self.plans.deploy(mapping)
        deployment = Deployment.start(
            directory, launcher=self.launcher, in_flight=self.in_flight, platform=self.platform
        )
        try:
            expected = self._expected(deployment, mapping, conditions)
        except BaseException:
            deployment.close()
            raise
        monitor = Monitor(len(deployment.plan.ranks), self.settings.window)
        deployment.on_timing = lambda rank, _frame, s: monitor.timing(rank, s)
        return Served(mapping, directory, deployment, expected, monitor)

    def _expected(
        self, deployment: Deployment, mapping: Mappings, conditions: Conditions
    ) -> Expected:
        ev = self.model.under(conditions).evaluate(mapping)
        by_rank = {r.rank: float(ev.busy_s[0, r.device_index]) for r in deployment.plan.ranks}
        return Expected(by_rank, float(period_s(ev)[0]))

    # --- serving ------------------------------------------------------------------------

    def submit(self, inputs: Mapping[str, Any]) -> Future:
        """As :meth:`Deployment.submit`; a frame handed over while the plan is swapped waits
        for the new plan."""
        outer: Future = Future()
        outer.set_running_or_notify_cancel()
        with self._gate:
            while self._paused:
                self._gate.wait(0.1)
            if self._served is None or self.error:
                raise ServeError(self.error or "the adaptive service is closed")
            served = self._served
            self._outstanding += 1
        try:
            inner = served.deployment.submit(inputs)
        except BaseException:
            with self._gate:
                self._outstanding -= 1
                self._gate.notify_all()
            raise
        frame = _Frame(outer, time.monotonic(), served)
        inner.add_done_callback(lambda f: self._done(frame, f))
        return outer

    def _done(self, frame: _Frame, inner: Future) -> None:
        now = time.monotonic()
        with self._gate:
            others = self._outstanding - 1
            self._outstanding = others
            self._gate.notify_all()
        if inner.exception() is not None:
            frame.outer.set_exception(inner.exception())
            return
        pressed = others >= self.in_flight - 1
        frame.served.monitor.done(now, now - frame.sent_s, pressed)
        frame.outer.set_result(inner.result())

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return self.submit(inputs).result()

    def stream(
        self, frames: Iterable[Mapping[str, Any]], in_flight: int | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """Each frame's outputs in order, up to ``in_flight`` frames in the service at once."""
        return in_order(frames, self.submit, Future.result, in_flight, self.in_flight)

    @property
    def plan(self) -> Path:
        """The folder of the plan being served."""
        assert self._served is not None
        return self._served.directory

    @property
    def mapping(self) -> Mappings:
        """The mapping being served."""
        assert self._served is not None
        return self._served.mapping

    # --- the controller ------------------------------------------------------------------

    def _control(self) -> None:
        try:
            probed = time.monotonic()
            while not self._stop.wait(self.settings.check_s):
                try:
                    self._look()
                    every = self.settings.probe_s
                    if self._rates and every > 0 and time.monotonic() - probed >= every:
                        probed = time.monotonic()
                        self._probe()
                except DseError as exc:  # a host that did not answer, a copy cut short
                    self._log("failed", reason=str(exc))
        except Exception as exc:  # noqa: BLE001 - logged; the service goes on unadapted
            self._log("failed", reason=f"the controller stopped: {exc}")
            LOG.exception("re-planning stopped")

    def _look(self) -> None:
        served = self._served
        if served is None or self._paused:
            return
        window = served.monitor.window()
        warm = time.monotonic() - served.since >= WARMUP_S
        if window is None or window.frames < 2 * self.settings.window or not warm:
            return  # the plan's first window of frames (and second) warms it up: not judged
        ref = served.reference
        if ref is None or (ref.period is None and window.period_s is not None):
            ref = served.reference = self._reference(served, window, ref)
            self._log(
                "reference",
                compute_ratio=by_rank(ref.compute),
                period_ratio=rounded(ref.period),
                measured=figures(window),
            )
        recent = served.monitor.window(last=self.settings.window // 2)
        if recent is None:
            return
        threshold = self.settings.threshold
        whole, newest = (drift(w, served.expected, ref, threshold) for w in (window, recent))
        # drifted on the window and on its newest half alike: a change, not a passing spell
        confirmed = Drift(
            {r: v for r, v in newest.devices.items() if r in whole.devices},
            newest.period if whole.period is not None else None,
        )
        now = time.monotonic()
        if not confirmed:
            served.suspect = None
        elif served.suspect is None:
            served.suspect = now  # acted on once it has lasted confirm_s
        elif now - served.suspect >= self.settings.confirm_s:
            served.suspect = None
            self._replan(served, confirmed, recent)

    def _reference(self, served: Served, window: Window, old: Reference | None) -> Reference:
        """The served plan's reference: its period's ratio from ``window``; each device's
        compute ratio from the first window it was judged on, whatever the plan (the model's
        error on a device's layers is the device's; the period's is the plan's), so a device
        that changed while plans were swapped is still seen to have changed."""
        new = Reference.of(window, served.expected)
        if old is not None:
            return dataclasses.replace(old, period=new.period)
        device = {r.rank: r.device for r in served.deployment.plan.ranks}
        for rank, ratio in new.compute.items():
            self._device_ref.setdefault(device[rank], ratio)
        compute = {rank: self._device_ref[device[rank]] for rank in new.compute}
        return dataclasses.replace(new, compute=compute)

    def _replan(self, served: Served, found: Drift, window: Window) -> None:
        devices = {r.rank: r.device for r in served.deployment.plan.ranks}

        def period_under(c: Conditions) -> float:
            return float(period_s(self.model.under(c).evaluate(served.mapping))[0])

        assert served.reference is not None
        self._probes.clear()  # what the ports read before this drift says nothing of now
        conditions = rescaled(
            self.conditions, found, devices, window, served.reference, period_under,
            self.settings.threshold,
        )  # fmt: skip
        if conditions == self.conditions:  # neither a device nor the network explains it
            served.reference = None  # the next window is the new normal
            self._log(
                "unexplained",
                period=rounded(found.period),
                measured=figures(window),
                predicted_period_ms=round(served.expected.period_s * 1e3, 3),
            )
            return
        self._log(
            "drift",
            devices={devices[r]: round(v, 3) for r, v in found.devices.items()},
            period=rounded(found.period),
            measured=figures(window),
            predicted_period_ms=round(served.expected.period_s * 1e3, 3),
            conditions=conditions_of(conditions),
        )
        self._decide(conditions, served)

    def adapt(self, conditions: Conditions) -> dict[str, Any]:
        """Re-plan for ``conditions`` now (an application that knows what changed: a link
        it was told of, a board it throttles), as a drift would: a search under them, and
        the plan switched or advised when a clearly better one is found. The decision's log
        entry."""
        conditions.check(self.model.platform)
        if self._served is None:
            raise ServeError(self.error or "the adaptive service is closed")
        self._log("told", conditions=conditions_of(conditions))
        return self._decide(conditions)

    def _decide(self, conditions: Conditions, seen: Served | None = None) -> dict[str, Any]:
        """Search under ``conditions``, then keep, advise or switch (the module's docstring).
        ``seen``: the plan a drift was seen on; nothing is done once another plan serves."""
        with self._adapting:
            served = self._served
            if served is None or (seen is not None and served is not seen):
                return {"event": "stale"}
            t0 = time.monotonic()
            best, best_ms, current_ms = self._search(served.mapping, conditions)
            figures = {
                "served_period_ms": round(current_ms, 3),
                "new_period_ms": round(best_ms, 3),
                "search_s": round(time.monotonic() - t0, 3),
            }
            self.conditions = conditions
            if best is None or best_ms > (1 - self.settings.margin) * current_ms:
                served.expected = self._expected(served.deployment, served.mapping, conditions)
                return self._log("keep", **figures)
            if self.settings.mode == "advise":
                served.expected = self._expected(served.deployment, served.mapping, conditions)
                return self._log("advise", mapping=best.ident(0), **figures)
            return self._switch(served, best, conditions, figures)

    def _search(
        self, current: Mappings, conditions: Conditions
    ) -> tuple[Mappings | None, float, float]:
        """The best-period plan a search under ``conditions`` finds within the budget, its
        predicted period and the served plan's (ms)."""
        from dse.config import AlgorithmConfig
        from dse.search import nsga2
        from dse.search.problem import MappingProblem

        model = self.model.under(conditions)
        chrom = CHROMOSOMES[self.settings.chromosome](
            self.net.graph, len(model.platform), speed=model.device_speed()
        )
        problem = MappingProblem(chrom, model, ["period", "latency"])
        algo = AlgorithmConfig(pop_size=self.settings.pop_size, n_gen=1 << 30, seed_structured=True)
        state = nsga2.new_search(problem, algo, self.settings.seed)
        deadline = time.monotonic() + self.settings.budget_s
        nsga2.run(state, stop=lambda: time.monotonic() > deadline)
        X, F, G = nsga2.front(state)
        current_ms = float(problem.evaluate_mappings(current)[0][0, 0])
        ok = np.flatnonzero(G[:, 0] <= 0)
        if not len(ok):
            return None, float("inf"), current_ms
        i = ok[np.lexsort((F[ok, 1], F[ok, 0]))[0]]
        mapping = chrom.decode(np.rint(X[i : i + 1]).astype(np.int64))
        return mapping, float(F[i, 0]), current_ms

    def _switch(
        self, old: Served, mapping: Mappings, conditions: Conditions, figures: dict
    ) -> dict[str, Any]:
        """Deploy and ship ``mapping`` while ``old`` serves, then pause, drain, stop ``old`` and
        start the new plan (``old`` started again if it will not start)."""
        clock = time.monotonic
        t0 = clock()
        directory = self.plans.deploy(mapping)
        steps = {"deploy_s": clock() - t0}
        try:
            shipping = self.plans.ship(directory, old.directory)
        except DseError as exc:  # the old plan goes on serving
            self._forget_later(directory)
            return self._log("failed", reason=str(exc), plan=directory.name, **figures)
        steps["ship_s"] = clock() - t0 - steps["deploy_s"]
        with self._gate:
            self._paused = True
        t1 = clock()
        event, why = "switch", None
        try:
            with self._gate:  # the frames in the old plan finish
                while self._outstanding and old.deployment.alive:
                    self._gate.wait(0.05)
            steps["drain_s"] = clock() - t1
            old.deployment.close()
            steps["stop_s"] = clock() - t1 - steps["drain_s"]
            try:
                served = self._start_plan(mapping, conditions, directory)
            except DseError as exc:  # the old plan serves again
                event, why = "failed", str(exc)
                served = self._start_plan(old.mapping, self.conditions, old.directory)
            steps["start_s"] = clock() - t1 - steps["drain_s"] - steps["stop_s"]
            with self._gate:
                self._served = served
        except BaseException as exc:
            self.error = f"re-planning left no plan serving: {exc}"
            raise
        finally:
            with self._gate:
                self._paused = False
                self._gate.notify_all()
        steps["paused_s"] = clock() - t1
        # meanwhile a plan serves: the one replaced, or the one that would not start, goes
        self._forget_later(old.directory if event == "switch" else directory)
        return self._log(
            event,
            **({"reason": why} if why else {}),
            plan=served.directory.name,
            mapping=mapping.ident(0),
            **{k: round(v, 3) for k, v in steps.items()},
            **shipping,
            **figures,
        )

    def _probe(self) -> None:
        """While the conditions hold the network slower than at the start, re-plan once every
        board's port probes back within the threshold of its rate at the start (the fastest of
        its last :data:`PROBES_KEPT` probes since the drift): a plan that stopped crossing a
        slow port cannot see it recover. (A probe only ever reads a port slower than it is,
        never faster: a board whose CPU is busy answers late. So it is trusted to say a port
        is back, not that it slowed: a drift says that.)"""
        served, c = self._served, self.conditions
        limit = 1 - self.settings.threshold
        slowed = c.network < limit or any(f < limit for f in c.ports.values())
        if served is None or self._paused or not slowed:
            return
        for b, r in self.plans.port_rates().items():
            factor = min(r / self._rates[b], PROBE_CAP) if self._rates[b] > 0 else 0.0
            self._probes.setdefault(b, deque(maxlen=PROBES_KEPT)).append(factor)
        factors = {b: max(seen) for b, seen in self._probes.items()}  # none reads too fast
        if min(factors.values()) < limit:
            return
        conditions = dataclasses.replace(c, network=1.0, ports={})
        self._log(
            "probed",
            factors={b: round(f, 3) for b, f in factors.items()},
            conditions=conditions_of(conditions),
        )
        self._decide(conditions, served)

    def _forget_later(self, directory: Path) -> None:
        forget = threading.Thread(target=self._forget, args=(directory,), daemon=True)
        forget.start()
        self._forgetting.append(forget)

    def _forget(self, directory: Path) -> None:
        try:
            self.plans.forget(directory)
        except DseError as exc:  # logged: the service goes on
            self._log("failed", reason=f"{directory.name} left on a host: {exc}")

    # --- the log, the end ------------------------------------------------------------------

    def _log(self, event: str, **figures: Any) -> dict[str, Any]:
        entry = {"t_s": round(time.monotonic() - self._t0, 3), "event": event, **figures}
        self.decisions.append(entry)
        logged(self.workdir, entry)
        return entry

    def close(self) -> None:
        """Stop watching, then stop the plan served after its frames in flight; its sub-models
        leave the hosts (the whole model staged on them stays: the next start reuses it)."""
        self._stop.set()
        if self._controller is not None and self._controller is not threading.current_thread():
            self._controller.join()
        with self._adapting, self._gate:  # after a switch adapt() may be making
            served, self._served = self._served, None
            self._gate.notify_all()
        if served is not None:
            served.deployment.close()
            self._forget(served.directory)
        for forget in self._forgetting:
            forget.join()

    def __enter__(self) -> Adaptive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
