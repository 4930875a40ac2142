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
from dse.net import Net
from dse.runtime.comparison import with_prediction, write_comparison
from dse.runtime.measure import check_gpus, deploy, measure_interleaved
from dse.runtime.measurements import Measurement, probe_times, start_rss_mb, take_out_drift
from dse.runtime.mpirun import Launcher
from dse.runtime.package import SUBMODELS
from dse.runtime.probe import probe_threads, speed_probe
from models_analytical.model import AnalyticalModel


def finite_number(value: Any) -> float | None:
    """``value`` as a float where it is a finite number (not a bool): a note of the
    coefficients file as fidelity may use it; None otherwise (absent, or an edited file)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def speed_reference(model: AnalyticalModel, net: Net) -> float | None:
    """The calibration's speed probe of this network (ms): only for the same network (its
    fingerprint) probed at the same thread count."""
    ref = model.coefficients.notes.get("speed_reference")
    if not isinstance(ref, dict) or ref.get("threads") != probe_threads(model.platform):
        return None  # none, or not of this shape (an edited file): this run's own probe then
    fingerprints, whole = ref.get("fingerprints"), ref.get("whole_ms")
    if not isinstance(fingerprints, dict) or fingerprints.get(net.name) != net.fingerprint:
        return None
    value = finite_number(whole.get(net.name) if isinstance(whole, dict) else None)
    return value if value is not None and value > 0 else None


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


@dataclass(frozen=True)
class Measured:
    """Each mapping's merged measurement with the prediction beside it (or why it failed),
    whether Ctrl-C cut the rounds short, and the machine's speed drift (None unprobed)."""

    results: list[dict[str, Any]]
    interrupted: bool
    speed: dict[str, Any] | None
    memory_baseline: dict[str, Any] | None = None  # :func:`memory_baseline`


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
    every mapping instead of every round of one); each mapping's merged measurements with the
    prediction beside them, written to its ``comparison.json``. With ``s.probe`` each run is
    brought to the calibration's probe of the network, or without one to this run's median
    probe (:mod:`dse.runtime.probe`).
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
        merged, interrupted = measure_interleaved(
            [d for _, d in dirs],
            s.rounds,
            s.warmup,
            s.iterations,
            s.timeout_s,
            np.random.default_rng(s.seed),
            lambda _r, _i: tick(),
            probe,
            launcher,
        )
        probes = probe_times(merged)
        if probes:
            now = round(float(np.median(probes)), 3)
            reference = speed_reference(model, net)
            speed = {
                "probe_ms": now,
                "reference_ms": round(reference, 3) if reference else now,
                "reference": "calibration" if reference else "this run's median probe",
            }
            speed["slower_pct"] = round((now / speed["reference_ms"] - 1) * 100, 2)
        for (p, d), result in zip(dirs, merged, strict=True):
            if result.get("status") == "ok":
                if speed is not None:
                    result = take_out_drift(result, speed["reference_ms"])
                result = with_prediction(result, model, mappings.take(p))
            write_comparison(d, result)
            results[p] = result
    ordered = [results[p] for p in range(len(labels))]
    return Measured(ordered, interrupted, speed, memory_baseline(model, merged))
