"""Measuring a fidelity run's mappings: deployed once, run in interleaved rounds, each run
brought to one speed of the machine, the model's prediction beside each."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.fidelity.settings import FidelitySettings
from dse.files import temporary_files
from dse.mapping import Mappings
from dse.net import Net, zoo
from dse.net.load import load_net
from dse.objectives import OBJECTIVES
from dse.runtime.comparison import with_prediction, write_comparison
from dse.runtime.measure import check_gpus, deploy, measure_interleaved
from dse.runtime.measurements import (
    Measurement,
    Slowdown,
    probe_times,
    start_rss_mb,
    take_out_drift,
)
from dse.runtime.mpirun import Launcher
from dse.runtime.package import SUBMODELS
from dse.runtime.probe import CalibratedSpeed, FileProbe, SpeedProbe, probe_threads, speed_probe
from models_analytical.model import AnalyticalModel

#: A mapping whose rounds' medians span more than this share of their median runs one round
#: more, after every mapping's rounds: one slow spell (a single-device GoogLeNet mapping once
#: took 87 ms in one round and 29 ms in the other) is then outvoted by the median of three.
AGAIN_ABOVE = 0.10


def finite_number(value: Any) -> float | None:
    """``value`` as a float where it is a finite number (not a bool): a note of the
    coefficients file as fidelity may use it; None otherwise (absent, or an edited file)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def calibration_probes(model: AnalyticalModel) -> dict[str, tuple[str, float]]:
    """The calibration's speed probes: network -> (its fingerprint, the whole network alone in
    ms), where probed at this platform's probe thread count; {} otherwise (none, or not of
    this shape: an edited file)."""
    ref = model.coefficients.notes.get("speed_reference")
    if not isinstance(ref, dict) or ref.get("threads") != probe_threads(model.platform):
        return {}
    fingerprints, whole = ref.get("fingerprints"), ref.get("whole_ms")
    if not isinstance(fingerprints, dict) or not isinstance(whole, dict):
        return {}
    out = {}
    for name, fingerprint in fingerprints.items():
        value = finite_number(whole.get(name))
        if isinstance(fingerprint, str) and value is not None and value > 0:
            out[str(name)] = (fingerprint, value)
    return out


def speed_reference(model: AnalyticalModel, net: Net) -> float | None:
    """The calibration's speed probe of this network (ms): only for the same network (its
    fingerprint) probed at the same thread count."""
    fingerprint, ms = calibration_probes(model).get(net.name, ("", 0.0))
    return ms if fingerprint == net.fingerprint else None


def calibrated_speed(
    model: AnalyticalModel, net: Net, probe: SpeedProbe, seed: int
) -> CalibratedSpeed | None:
    """For a network calibration did not probe: probes of the zoo networks it did (the same
    graphs as then: their fingerprints), on ``probe``'s cores, beside their calibration
    probes; None where there are none."""
    probes = {}
    for name, (fingerprint, ms) in calibration_probes(model).items():
        if name == net.name or name not in zoo.NETS:
            continue  # a user's file calibration probed is not at hand
        if load_net({"name": name}).fingerprint == fingerprint:
            path = zoo.materialize(name, seed)
            probes[name] = (FileProbe(path, probe.cores, probe.threads), ms)
    return CalibratedSpeed(probes) if probes else None


#: A rank's start RSS this far (relative) from calibration's is reported as a changed baseline.
BASELINE_CHANGED = 0.05


def memory_baseline(model: AnalyticalModel, merged: list[Measurement]) -> dict[str, Any] | None:
    """The RSS the runs' ranks started at before loading (median), beside calibration's
    (``memory_reference``; None without one) and whether it moved by more than
    :data:`BASELINE_CHANGED`: a memory prediction carries that difference in full."""
    now = start_rss_mb(merged)
    if now is None:
        return None
    ref = model.coefficients.notes.get("memory_reference")
    then = finite_number(ref.get("start_mb") if isinstance(ref, dict) else None)
    return {
        "start_mb": now,
        "reference_mb": then,
        "changed": then is not None and abs(now - then) > BASELINE_CHANGED * then,
    }


def beside(probe: SpeedProbe, level: CalibratedSpeed) -> Callable[[], float]:
    """``probe`` with the calibrated networks' probes taken just before it, each time."""

    def both() -> float:
        level()
        return probe()

    return both


def drift(now: float, reference: float | None, level: CalibratedSpeed | None) -> dict[str, Any]:
    """The speed every run is brought to (``reference_ms``) from this run's median probe
    ``now`` (ms): the calibration's probe of this network; for a network it did not probe,
    ``now`` over how much slower the calibrated networks ran than then (the median of
    ``level``'s calls); without those, ``now`` itself (only the drift within the run comes
    out)."""
    now = round(now, 3)
    if reference is not None:
        speed: dict[str, Any] = {"reference_ms": round(reference, 3), "reference": "calibration"}
    elif level is not None and level.factors:
        slower = float(np.median(level.factors))
        speed = {
            "reference_ms": round(now / slower, 3),
            "reference": "calibrated networks",
            "networks": sorted(level.probes),
        }
    else:
        speed = {"reference_ms": now, "reference": "this run's median probe"}
    speed["probe_ms"] = now
    speed["slower_pct"] = round((now / speed["reference_ms"] - 1) * 100, 2)
    return speed


def slowdown(model: AnalyticalModel, mapping: Mappings) -> Slowdown:
    """How much longer ``mapping`` (one) takes in ``model`` with the machine ``f`` times
    slower than at calibration: its latency and period with every device's own work ``f``
    times as long and its transfers as they were, over those at calibration. The speed probe
    times a core, and a shaped link, a wire or a radio does not follow its core: a mapping
    whose time is half transfers slows by half as much."""
    at_calibration = model.evaluate(mapping)
    latency = float(at_calibration.latency_s[0])
    period = float(OBJECTIVES["period"].values(at_calibration)[0])

    def factors(f: float) -> tuple[float, float]:
        ev = model.with_compute_slower(f).evaluate(mapping)
        return (
            float(ev.latency_s[0]) / latency,
            float(OBJECTIVES["period"].values(ev)[0]) / period,
        )

    return factors


@dataclass(frozen=True)
class Measured:
    """Each mapping's merged measurement with the prediction beside it (or why it failed),
    whether Ctrl-C cut the rounds short, and the machine's speed drift (None unprobed)."""

    results: list[dict[str, Any]]
    interrupted: bool
    speed: dict[str, Any] | None
    memory_baseline: dict[str, Any] | None = None  # :func:`memory_baseline`
    ran_again: list[str] | None = None  # the mappings whose rounds disagreed (AGAIN_ABOVE)


def measure(
    out: Path,
    net: Net,
    model: AnalyticalModel,
    mappings: Mappings,
    labels: list[str],
    s: FidelitySettings,
    tick: Callable[[], None],
    launcher: Launcher | None = None,
) -> Measured:
    """Deploy every mapping into ``out/phase2/<label>``, then run them all ``s.rounds`` times,
    each round in a new random order (a slow spell of the machine then hits one round of
    every mapping instead of every round of one), and one round more for each mapping whose
    rounds disagree (:data:`AGAIN_ABOVE`); each mapping's merged measurements with the
    prediction beside them, written to its ``comparison.json``. With ``s.probe`` each run is
    brought to the machine's speed in the calibration (:func:`drift`; :mod:`dse.runtime.probe`),
    by the model's slowdown of that mapping (:func:`slowdown`).
    With ``s.stream`` each run then measures the pipelined period too (its median over the
    rounds). Sub-models are deleted at the end unless ``s.keep``. ``tick`` after each
    deployment and each run; ``launcher``: how the ranks start (default: on the platform's
    hosts by name)."""
    platform = model.platform
    dirs: list[tuple[int, Path]] = []
    results: dict[int, dict[str, Any]] = {}
    interrupted = False
    speed = None
    with ExitStack() as temporary:
        for p, label in enumerate(labels):
            d = out / "phase2" / label
            if not s.keep:  # removed at the end, or if this process is killed, at the next start
                temporary.enter_context(temporary_files(d, SUBMODELS))
            try:
                check_gpus(platform, mappings.take(p))
                deploy(
                    net, platform, mappings.take(p), d, s.seed, s.warmup, s.iterations,
                    s.stream, launcher,
                )  # fmt: skip
                dirs.append((p, d))
            except DseError as exc:
                results[p] = {"status": "failed", "reason": str(exc)}
            tick()
        probe = speed_probe(dirs[0][1], platform, launcher) if s.probe and dirs else None
        reference = speed_reference(model, net)
        level = None
        if probe is not None and reference is None:  # held out of calibration
            level = calibrated_speed(model, net, probe, s.seed)
        merged, interrupted = measure_interleaved(
            [d for _, d in dirs],
            s.rounds,
            s.warmup,
            s.iterations,
            s.timeout_s,
            np.random.default_rng(s.seed),
            lambda _r, _i: tick(),
            probe if level is None or probe is None else beside(probe, level),
            launcher,
            AGAIN_ABOVE,
        )
        probes = probe_times(merged)
        if probes:
            speed = drift(float(np.median(probes)), reference, level)
        for (p, d), result in zip(dirs, merged, strict=True):
            if result.get("status") == "ok":
                if speed is not None:
                    result = take_out_drift(
                        result, speed["reference_ms"], slowdown(model, mappings.take(p))
                    )
                result = with_prediction(result, model, mappings.take(p))
            write_comparison(d, result)
            results[p] = result
    ordered = [results[p] for p in range(len(labels))]
    again = [
        label
        for label, r in zip(labels, ordered, strict=True)
        if len((r.get("latency_ms") or {}).get("rounds_ms", ())) > s.rounds
    ]
    return Measured(ordered, interrupted, speed, memory_baseline(model, merged), again)
