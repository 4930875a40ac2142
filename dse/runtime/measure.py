"""Deploy one mapping, run it under MPI and put the model's prediction beside each figure."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.mapping import Mappings
from dse.net import Net
from dse.platform import Platform
from dse.runtime.launch import launch
from dse.runtime.package import check_existing, mpiexec_path, write_deployment
from dse.runtime.partition import partition
from models_analytical.model import AnalyticalModel


def reference(net: Net, seed: int) -> dict[str, Any]:
    """Where the runtime finds the whole model for the equivalence check."""
    from dse.net import zoo

    path = net.path if net.path is not None else zoo.materialize(net.name, seed)
    shape = net.input_shape
    if shape is not None and not isinstance(shape, list | dict | str | int | float):
        shape = list(shape) if not hasattr(shape, "items") else dict(shape)
    return {"path": str(path), "input_shape": shape}


def check_gpus(platform: Platform, mapping: Mappings) -> None:
    """A gpu device that mapping 0 uses needs CUDA here (one line otherwise)."""
    import onnxruntime as ort

    used = set(mapping.device[0][mapping.device[0] >= 0].tolist())
    used |= set(np.flatnonzero(mapping.sizes[0].sum(axis=0) > 0).tolist())
    gpus = [dev.name for d, dev in enumerate(platform.devices) if d in used and dev.kind == "gpu"]
    if gpus and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise DseError(
            f"device {gpus[0]} is a gpu but onnxruntime has no CUDA execution provider here: "
            "measure on the boards, or install onnxruntime-gpu"
        )


def deploy(
    net: Net,
    platform: Platform,
    mapping: Mappings,
    out: Path,
    seed: int = 0,
    warmup: int = 4,
    iterations: int = 20,
    stream: int = 0,
) -> dict[str, Any]:
    """Partition mapping 0 of ``mapping`` and write its deployment directory; its plan."""
    check_existing(out, net.fingerprint, mapping.ident(0))
    dep = partition(net, mapping, platform, seed=seed)
    dep.plan["reference"] = reference(net, seed)
    run = {"warmup": warmup, "iterations": iterations, "stream": stream}
    write_deployment(dep, platform, out, run)
    return dep.plan


def compare(predicted: float | None, measured: float | None) -> dict[str, Any]:
    err = None
    if predicted is not None and measured:
        err = round((predicted - measured) / measured * 100.0, 2)
    return {"predicted": predicted, "measured": measured, "error_pct": err}


def peak_rss(rank: dict[str, Any]) -> float | None:
    """A rank's peak RSS (MB) over its life: the larger of loading and running."""
    vals = [rank.get("peak_rss_loading_mb"), rank.get("peak_rss_running_mb")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def with_prediction(
    result: dict[str, Any], model: AnalyticalModel, mapping: Mappings
) -> dict[str, Any]:
    """``result`` (measurements.json) with ``predicted`` and a ``comparison`` per figure."""

    platform = model.platform
    pred = model.evaluate(mapping.take(0)).as_dict(platform)
    result["predicted"] = pred
    cmp: dict[str, Any] = {"latency_ms": compare(pred["latency_ms"], None)}
    if result.get("latency_ms"):
        cmp["latency_ms"] = compare(pred["latency_ms"], result["latency_ms"]["median"])
        if "drift" in result["latency_ms"]:  # and with the machine's drift taken out
            cmp["latency_adjusted_ms"] = compare(pred["latency_ms"], measured_latency_ms(result))
    devices: dict[str, Any] = {}
    for r in result.get("ranks", []):
        d = r["device"]
        devices[d] = {
            "compute_ms": compare(pred["compute_ms"].get(d), r["compute_ms"]["median"]),
            "communication_ms": compare(
                pred["communication_ms"].get(d), r["communication_ms"]["median"]
            ),
            "bytes_sent": compare(pred["bytes_sent"].get(d), r["bytes_sent"]),
            # the rank's peak RSS over its life: loading (weights held twice) or running
            "memory_mb": compare(pred["memory_mb"].get(d), peak_rss(r)),
            "energy_j": compare(pred["energy_j"].get(d), r["energy_j"]),
        }
    cmp["devices"] = devices
    if result.get("stream"):
        cmp["period_ms"] = compare(pred["objectives"]["period_ms"], result["stream"]["period_ms"])
    result["comparison"] = cmp
    return result


def deploy_and_measure(
    net: Net,
    platform: Platform,
    model: AnalyticalModel | None,
    mapping: Mappings,
    out: Path,
    seed: int = 0,
    warmup: int = 4,
    iterations: int = 20,
    timeout_s: float = 600.0,
    stream: int = 0,
) -> dict[str, Any]:
    """Deploy, run under mpiexec, and write measurements.json with the prediction beside each
    measured figure; a failed run comes back as ``{"status": "failed", "reason": ...}``."""
    check_gpus(platform, mapping)
    mpiexec_path()  # one line before anything is written when MPI is missing
    deploy(net, platform, mapping, out, seed, warmup, iterations, stream)
    result = launch(Path(out), timeout_s, warmup, iterations)
    if model is not None:
        result = with_prediction(result, model, mapping)
    from dse.files import write_text

    write_text(Path(out) / "measurements.json", json.dumps(result, indent=1))
    return result


def merge_runs(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One measurement from several runs of one deployment (rounds interleaved with other
    deployments, so a slow spell of the machine hits one round of each, not all of one).

    ``latency_ms.median`` is the median of the runs' medians; p10, p90 and ``all`` pool every
    iteration; ``rounds_ms`` lists each run's median and ``round_spread`` is (max - min) /
    median of them. The other figures (ranks, memory, equivalence) are those of the run whose
    median is the median run. A deployment with a failed run is failed, with that reason."""
    failed = [r for r in results if r.get("status") != "ok" or not r.get("latency_ms")]
    if failed or not results:
        return failed[0] if failed else {"status": "failed", "reason": "not run"}
    medians = [float(r["latency_ms"]["median"]) for r in results]
    mid = results[int(np.argsort(medians)[(len(results) - 1) // 2])]
    every = np.concatenate([np.asarray(r["latency_ms"]["all"], dtype=float) for r in results])
    med = float(np.median(medians))
    merged = dict(mid)
    merged["latency_ms"] = {
        "median": round(med, 4),
        "p10": round(float(np.percentile(every, 10)), 4),
        "p90": round(float(np.percentile(every, 90)), 4),
        "all": [round(float(x), 4) for x in every],
        "rounds_ms": [round(m, 4) for m in medians],
        "round_spread": round((max(medians) - min(medians)) / med, 4),
    }
    if all(len(r.get("probe_ms", ())) == 2 for r in results):  # probes on either side of each
        merged["latency_ms"]["rounds_probe_ms"] = [
            round(float(np.mean(r["probe_ms"])), 4) for r in results
        ]
    merged.pop("probe_ms", None)
    return merged


def take_out_drift(merged: dict[str, Any], reference_ms: float) -> dict[str, Any]:
    """``merged`` with ``latency_ms.drift``: each round's median scaled by ``reference_ms`` over
    the speed probe beside it (:mod:`dse.runtime.probe`), i.e. the latency the run would have
    had with the machine at the reference's speed, and the median of those. Without probes,
    ``merged`` unchanged."""
    lat = merged.get("latency_ms") or {}
    probes = lat.get("rounds_probe_ms")
    if not probes:
        return merged
    adjusted = [m * reference_ms / p for m, p in zip(lat["rounds_ms"], probes, strict=True)]
    lat["drift"] = {
        "reference_ms": round(float(reference_ms), 4),
        "probe_ms": round(float(np.median(probes)), 4),
        "rounds_adjusted_ms": [round(float(a), 4) for a in adjusted],
        "median_adjusted": round(float(np.median(adjusted)), 4),
    }
    return merged


def probe_times(merged: list[dict[str, Any]]) -> list[float]:
    """Every round's speed probe (ms) over merged measurements; [] where none was probed."""
    return [x for r in merged for x in (r.get("latency_ms") or {}).get("rounds_probe_ms", [])]


def measured_latency_ms(result: dict[str, Any]) -> float:
    """A measurement's latency: drift taken out where it was (:func:`take_out_drift`)."""
    lat = result["latency_ms"]
    return float(lat["drift"]["median_adjusted"] if "drift" in lat else lat["median"])


def measure_interleaved(
    directories: list[Path],
    rounds: int,
    warmup: int,
    iterations: int,
    timeout_s: float,
    rng: np.random.Generator,
    on_run: Callable[[int, int], None] | None = None,
    probe: Callable[[], float] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Run every deployment ``rounds`` times, each round in a new random order; their merged
    measurements (:func:`merge_runs`) in the order given, and whether Ctrl-C cut the rounds
    short (then each merges the runs it had; one never run is failed, "interrupted"). A
    deployment that failed is not run again. ``on_run(round, index)`` follows each run.
    ``probe`` (:class:`dse.runtime.probe.SpeedProbe`) is timed before the first run and after
    each one: a run's ``probe_ms`` holds the probes on either side of it."""
    runs: list[list[dict[str, Any]]] = [[] for _ in directories]
    interrupted = False
    try:
        last = probe() if probe is not None else None
        for rnd in range(rounds):
            for i in rng.permutation(len(directories)).tolist():
                if runs[i] and runs[i][-1].get("status") != "ok":
                    continue
                result = launch(directories[i], timeout_s, warmup, iterations)
                runs[i].append(result)  # kept even if Ctrl-C comes during the probe after it
                if probe is not None:
                    now = probe()
                    result["probe_ms"] = [round(last, 4), round(now, 4)]
                    last = now
                if on_run is not None:
                    on_run(rnd, i)
    except KeyboardInterrupt:
        interrupted = True
    merged = [
        merge_runs(r) if r else {"status": "failed", "reason": "interrupted before it ran"}
        for r in runs
    ]
    return merged, interrupted
