"""Calibration's deployments: mappings of each network run under MPI by the runtime.

Per network, one device, a vertical cut, a split of every splittable layer over two devices and a
random mix (:data:`LABELS`), run in interleaved rounds (``rounds``, each in a random order; each
mapping keeps the median of its rounds' medians, and one whose rounds disagree runs one round more:
:mod:`dse.measuring.rounds`). The first network also runs whole on a device other than the entry,
whose rank then only sends the image (:data:`ENTRY_ONLY`): the memory of a rank that runs no
sub-model. Where those two devices are on different hosts and a host has two cpu devices, each
network's mix and split also run on those two, in rounds of their own (:data:`SAME_HOST`,
:data:`SPLIT_SAME_HOST`): crossings within a host cost otherwise per byte, and two devices of one
host computing side by side run slower (:func:`shared_host`). A speed probe beside the runs gives
the speed every latency is brought to (:func:`dse.measuring.rounds.take_out_drift`).

The measurements become the fits' :class:`~models_analytical.calibration.MeasuredRun` beside
a model of given coefficients (:func:`measured`); the fits that need the deployments' own
rules live here: :func:`shared_host` and :func:`cut_costs`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dse.calibrate.journal import Journal, NoJournal, key_of
from dse.calibrate.settings import CalibrationSettings, net_of
from dse.errors import DseError
from dse.mapping import Mappings, from_devices, random_mappings, remap, whole
from dse.measuring.rounds import (
    AGAIN_ABOVE,
    Rounds,
    measure_interleaved,
    probe_times,
    start_rss_mb,
    take_out_drift,
)
from dse.net.graph import LayerGraph
from dse.platform import Platform
from dse.records import read, to_json
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.probe import probe_threads, speed_probe
from models_analytical.calibration import (
    CutCosts,
    MeasuredRun,
    RankMeasurement,
    SharedHostFit,
    fit_cuts,
    fit_shared_host,
)
from models_analytical.coefficients import Coefficients, MemoryReference, SpeedReference
from models_analytical.model import AnalyticalModel

#: Each network's mappings: the one-device reference, then the cut mappings.
LABELS = ("single", "vertical", "split", "mixed")
CUTS = LABELS[1:]
#: The first network's extra mapping: whole on ``b``, so the entry device ``a`` runs nothing.
ENTRY_ONLY = "entry-only"
#: Each network's mixed mapping again on two devices of one host (:func:`same_host_pair`), in
#: rounds of its own after the others (their probe brings it to the same speed): what the cost
#: per byte crossing within a host is fitted on, where the other cuts all cross between hosts.
SAME_HOST = "mixed-same-host"
#: Each network's split mapping (every splittable layer over two devices) on those two devices
#: of one host, in rounds of its own after :data:`SAME_HOST`: what the shared-host factor is
#: fitted on (:func:`shared_host`), where the other cuts all cross between hosts.
SPLIT_SAME_HOST = "split-same-host"
#: What to do about a journal whose measurements are not as this dse writes them.
JOURNAL_FIX = "measure again without resume=true"
#: Each network's one-device run on every other cpu type's device (``single:<type>``): what
#: that type's layer times are anchored to.
SINGLE = "single"


def single_label(dtype: str) -> str:
    return f"{SINGLE}:{dtype}"


def is_single(label: str) -> bool:
    """A one-device run: the first device's (``single``) or another type's."""
    return label == SINGLE or label.startswith(f"{SINGLE}:")


def other_types(platform: Platform) -> list[tuple[str, int]]:
    """The cpu types other than the deployments' first device's, each with its first device:
    each network also runs alone there (:func:`single_label`)."""
    a, _ = cut_devices(platform)
    done = {platform.devices[a].type}
    out = []
    for i, d in enumerate(platform.devices):
        if d.kind == "cpu" and d.type not in done:
            done.add(d.type)
            out.append((d.type, i))
    return out


def calibration_mappings(
    graph: LayerGraph, times: np.ndarray, a: int, b: int, n_dev: int, entry_only: bool = False
) -> Mappings:
    """One device; a vertical cut at half the time; every splittable layer over two devices;
    each layer on a random one of the two (a third of the splittable ones split): many cuts
    (:data:`LABELS`); with ``entry_only``, then the whole network on ``b`` (:data:`ENTRY_ONLY`;
    ``a`` must be the entry device)."""
    n = len(graph)
    on = np.zeros((3, n, n_dev), dtype=bool)
    on[0, :, a] = True
    cut = int(np.searchsorted(np.cumsum(times), times.sum() / 2))
    cut = min(max(cut, 1), n - 1)
    on[1, :cut, a] = True
    on[1, cut:, b] = True
    on[2] = split_on(graph, a, b, n_dev)
    batches = [from_devices(graph, on), mixed_mapping(graph, (a, b), n_dev)]
    if entry_only:
        batches.append(whole(graph, n_dev, np.full(n, b)))
    return Mappings.concat(batches)


def split_on(graph: LayerGraph, a: int, b: int, n_dev: int) -> np.ndarray:
    """The devices of each layer [L, D] where every splittable layer (of two channels or more)
    is split over ``a`` and ``b`` and every other layer runs on ``a``."""
    on = np.zeros((len(graph), n_dev), dtype=bool)
    on[:, a] = True
    on[:, b] = graph.splittable & (graph.out_channels >= 2)
    return on


def deployment_dir(root: Path, net: str, label: str) -> Path:
    """Where a network's mapping ``label`` is deployed under ``root``."""
    return root / f"{net}-{label.replace(':', '-')}"


def may_be_left_out(label: str) -> bool:
    """A run the calibration goes on without when it fails (a memory cap too small): a
    one-device run on another type, :data:`SAME_HOST` or :data:`SPLIT_SAME_HOST`; the others'
    fits need them."""
    return label in (SAME_HOST, SPLIT_SAME_HOST) or (label != SINGLE and is_single(label))


def mixed_mapping(graph: LayerGraph, pair: tuple[int, int], n_dev: int) -> Mappings:
    """Each layer on a random one of ``pair`` (a third of the splittable ones split), the
    same layers the same way whichever the pair."""
    rng = np.random.default_rng(12345)
    return remap(random_mappings(graph, 2, "mixed", 1, rng), list(pair), n_dev)


def same_host_pair(platform: Platform) -> tuple[int, int] | None:
    """The first two cpu devices of the first host that has two, where the deployments' two
    devices (:func:`cut_devices`) are on different hosts; else None (their cuts already cross
    within a host, or no host has two cpus)."""
    a, b = cut_devices(platform)
    if platform.devices[a].host == platform.devices[b].host:
        return None
    by_host: dict[str, list[int]] = {}
    for i, d in enumerate(platform.devices):
        if d.kind == "cpu":
            by_host.setdefault(d.host, []).append(i)
    return next(((ids[0], ids[1]) for ids in by_host.values() if len(ids) >= 2), None)


def cut_devices(platform: Platform) -> tuple[int, int]:
    """The two cpu devices the deployments run on: the entry device first where it is a cpu
    (then the first network's :data:`ENTRY_ONLY` mapping leaves it idle)."""
    cpus = [i for i, d in enumerate(platform.devices) if d.kind == "cpu"]
    if len(cpus) < 2:
        raise DseError(f"platform '{platform.name}' needs two cpu devices to calibrate cuts")
    a = platform.entry if platform.entry in cpus else cpus[0]
    return a, next(c for c in cpus if c != a)


def runs_per_calibration(platform: Platform, networks: int) -> int:
    """How many mappings the deployments measure: :data:`LABELS` and a single per other type
    per network, :data:`SAME_HOST` and :data:`SPLIT_SAME_HOST` per network where there is a
    pair for them, and :data:`ENTRY_ONLY` where the entry device can be left idle."""
    extra = len(other_types(platform)) + 2 * (same_host_pair(platform) is not None)
    return (len(LABELS) + extra) * networks + (cut_devices(platform)[0] == platform.entry)


@dataclass(frozen=True)
class Deployed:
    """One calibration mapping measured under MPI: its merged measurement (drift taken out
    where probed)."""

    net: str
    label: str
    graph: LayerGraph
    mapping: Mappings
    result: Measurement
    directory: Path  # its deployment (gone once the calibration ends)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median of its iterations."""
        lat = self.result.latency
        return round((lat.p90 - lat.p10) / lat.median, 4)

    @property
    def rounds_ms(self) -> list[float]:
        """Each round's median as measured."""
        lat = self.result.latency
        return lat.rounds_ms or [lat.median]


@dataclass(frozen=True)
class Deployments:
    """Every measured mapping, and per network its speed probe's median (ms) and
    fingerprint (none without probes)."""

    runs: tuple[Deployed, ...]
    speed: dict[str, tuple[float, str]]
    left_out: dict[str, str]  # single:<type> runs that failed (a memory cap too small...)
    start_rss_mb: float | None = None  # a rank's RSS before loading (median over the ranks)

    def memory_reference(self) -> MemoryReference | None:
        """The coefficients' ``memory_reference`` note (:mod:`dse.fidelity` compares with it)."""
        if self.start_rss_mb is None:
            return None
        what = (
            "a rank's RSS before it loads any sub-model (the interpreter, onnxruntime, MPI), "
            "median over the deployments' ranks: the baseline every fitted memory figure sits "
            "on, and dse.fidelity compares its own runs' with it"
        )
        return MemoryReference(self.start_rss_mb, what)

    def speed_reference(self, platform: Platform) -> SpeedReference | None:
        """The coefficients' ``speed_reference`` note (:mod:`dse.fidelity` compares with it)."""
        if not self.speed:
            return None
        what = (
            "the whole network alone (dse.runtime.launch.probe), median over the probes beside "
            "the deployment runs; every latency fitted here was brought to this speed, and "
            "dse.fidelity compares its own probes with it"
        )
        return SpeedReference(
            whole_ms={n: ms for n, (ms, _) in self.speed.items()},
            threads=probe_threads(platform),
            fingerprints={n: fp for n, (_, fp) in self.speed.items()},
            what=what,
        )


def measure_deployments(
    s: CalibrationSettings,
    coefficients: Coefficients,
    tick: Callable[[str], None],
    root: Path,
    journal: Journal | None = None,
) -> Deployments:
    """:data:`LABELS` per network (the first network also :data:`ENTRY_ONLY`, where the entry
    is a cpu), placed by the layer times of ``coefficients``, deployed and run in interleaved
    rounds with a speed probe (``probe``) beside them, then :data:`SAME_HOST` and
    :data:`SPLIT_SAME_HOST` where there is a pair for them; ``tick`` after each mapping. The
    deployments are written under ``root`` (the caller removes it), but for a refit; each
    network's measurements go through ``journal``.
    A one-device run on another type or a run on the pair that fails (a memory cap too small)
    is left out; any other failure ends the calibration."""
    journal = journal or NoJournal()
    platform = s.platform
    a, b = cut_devices(platform)
    pair = same_host_pair(platform)
    n_dev = len(platform.devices)
    out: list[Deployed] = []
    measured: list[Measurement] = []
    speed: dict[str, tuple[float, str]] = {}
    left_out: dict[str, str] = {}
    rng = np.random.default_rng(s.seed)
    for i, name in enumerate(s.nets):
        net = net_of(s, name)
        times = AnalyticalModel(net.graph, platform, coefficients).tables.t_work[0]
        entry_only = i == 0 and a == platform.entry
        others = other_types(platform)
        labels = (*LABELS, *((ENTRY_ONLY,) if entry_only else ()),
                  *(single_label(t) for t, _ in others))  # fmt: skip
        n = len(net.graph)
        batch = calibration_mappings(net.graph, times, a, b, n_dev, entry_only)
        if others:
            alone = [whole(net.graph, n_dev, np.full(n, d)) for _, d in others]
            batch = Mappings.concat([batch, *alone])
        sets = [(labels, batch)]
        if pair is not None:  # in rounds of their own: a journal from before them still serves
            sets.append(((SAME_HOST,), mixed_mapping(net.graph, pair, n_dev)))
            split = from_devices(net.graph, split_on(net.graph, *pair, n_dev)[None])
            sets.append(((SPLIT_SAME_HOST,), split))
        probe_dir = deployment_dir(root, name, labels[0])
        for labels, batch in sets:
            dirs = [deployment_dir(root, name, label) for label in labels]
            for p, d in enumerate(dirs):
                if not s.refit:  # the sub-models are timed from these
                    deploy(
                        net, platform, batch.take(p), d, s.seed, s.warmup, s.iterations,
                        launcher=s.launcher,
                    )  # fmt: skip
            request = {"net": name, "labels": list(labels),
                       "mappings": [batch.ident(p) for p in range(len(labels))],
                       "devices": [d.name for d in platform.devices], "seed": s.seed,
                       "rounds": s.rounds, "warmup": s.warmup, "iterations": s.iterations,
                       "probe": s.probe, "again_above": AGAIN_ABOVE}  # fmt: skip
            measure = functools.partial(_as_json, run_rounds, s, dirs, rng, probe_dir)
            key = key_of("deployments", request)
            if s.refit and all(map(may_be_left_out, labels)) and not journal.has(key):
                # a journal from before these runs (the pair's): refit it as it was fitted then
                why = "not in the journal (taken before calibration ran it): resume=true runs it"
                results = [Measurement.failed(why)]
            else:
                where = f"{journal.path}: {key}"
                docs = journal.take(key, measure)
                results = [read(Measurement, doc, where, JOURNAL_FIX) for doc in docs]
            measured += results
            probes = probe_times(results)
            if probes and name not in speed:  # the first set's probes set the speed
                speed[name] = (round(float(np.median(probes)), 4), net.fingerprint)
            for p, (label, res) in enumerate(zip(labels, results, strict=True)):
                if not res.ok and may_be_left_out(label):
                    left_out[f"{name}/{label}"] = str(res.reason)
                    tick(f"left out {name} {label}")
                    continue
                if not res.ok:
                    raise DseError(f"calibration run {name}/{label} failed: {res.reason}")
                if probes:
                    res = take_out_drift(res, speed[name][0])
                out.append(Deployed(name, label, net.graph, batch.take(p), res, dirs[p]))
                tick(f"ran {name} {label}")
    return Deployments(tuple(out), speed, left_out, start_rss_mb(measured))


def _as_json(run: Callable[..., list[Measurement]], *args: Any) -> list[Any]:
    """``run(*args)``'s measurements as the journal keeps them (JSON)."""
    return [to_json(m) for m in run(*args)]


def run_rounds(
    s: CalibrationSettings, dirs: list[Path], rng: np.random.Generator, probe_dir: Path
) -> list[Measurement]:
    """The deployments in ``dirs`` run in interleaved rounds (a slow spell hits one round of
    each mapping, and the one-device run the layer times are anchored to is measured beside
    the cut ones; :func:`~dse.measuring.rounds.measure_interleaved` and its re-run rule), a
    speed probe (of the network in ``probe_dir``) beside them; Ctrl-C ends the calibration."""
    probe = speed_probe(probe_dir, s.platform, s.launcher) if s.probe else None
    rounds = Rounds(s.rounds, s.warmup, s.iterations, s.timeout_s)
    results, interrupted = measure_interleaved(dirs, rounds, rng, probe=probe, launcher=s.launcher)
    if interrupted:
        raise KeyboardInterrupt
    return results


def measured(
    runs: Sequence[Deployed], platform: Platform, coefficients: Coefficients
) -> list[MeasuredRun]:
    """The runs as the fits read them, each beside the model of ``coefficients`` (one per
    network)."""
    names = [d.name for d in platform.devices]
    models: dict[str, AnalyticalModel] = {}
    out = []
    for r in runs:
        if r.net not in models:
            models[r.net] = AnalyticalModel(r.graph, platform, coefficients)
        ranks = tuple(
            RankMeasurement(
                device=names.index(rank.device),
                compute_s=rank.compute_ms.median / 1e3,
                running_mb=rank.peak_rss_running_mb,
                loading_mb=rank.peak_rss_loading_mb,
            )
            for rank in r.result.ranks
        )
        latency = r.result.latency.measured_ms
        out.append(MeasuredRun(r.net, r.label, models[r.net], r.mapping, latency, ranks))
    return out


def shared_host(runs: Sequence[MeasuredRun], platform: Platform) -> SharedHostFit:
    """The shared-host factor (:func:`~models_analytical.calibration.fit_shared_host`) of each
    network's split over two devices of one host (``split`` where the deployments' two devices
    share a host, else :data:`SPLIT_SAME_HOST`), against its one-device runs: every layer of
    the split runs side by side. 1 (not measured) where no such run was made."""
    a, b = cut_devices(platform)
    one_host = platform.devices[a].host == platform.devices[b].host
    label = "split" if one_host else SPLIT_SAME_HOST
    splits = [r for r in runs if r.label == label]
    if not splits:
        why = "no split over two devices of one host ran"
        return SharedHostFit(1.0, {"factor": 1.0, "why": why})
    types = [d.type for d in platform.devices]
    fit = fit_shared_host([r for r in runs if is_single(r.label)], splits, types)
    return replace(fit, provenance={**fit.provenance, "runs": label})


def cut_costs(deployed: Sequence[Deployed], runs: Sequence[MeasuredRun]) -> CutCosts:
    """The cut costs (:func:`~models_analytical.calibration.fit_cuts`) over every mapping but
    the one-device ones; the provenance also keeps each one's rounds as measured."""
    cut = [d for d in deployed if not is_single(d.label)]
    fit = fit_cuts([r for r in runs if not is_single(r.label)])
    rest = dict(fit.provenance)
    prov = {
        "mappings": rest.pop("mappings"),
        "spread": [d.spread for d in cut],
        "rounds_ms": [d.rounds_ms for d in cut],  # as measured
        "rounds_probe_ms": [d.result.latency.rounds_probe_ms or None for d in cut],
        # what was fitted: the rounds brought to the speed reference (median of the rounds of
        # rounds_ms x reference / rounds_probe_ms), or as measured without a probe
        **rest,
    }
    return replace(fit, provenance=prov)
