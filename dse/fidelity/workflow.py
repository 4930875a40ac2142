"""A fidelity run's steps: choose mappings, measure them, compare, write the report.

Deploys and measures N mappings under MPI: the per-objective bests of a short search and points
spread along its front, then random mappings of every kind (:mod:`dse.fidelity.choose`),
measured in interleaved rounds (:mod:`dse.fidelity.measure`). Compares predicted against
measured latency, per-device peak memory (the rank's peak RSS while loading and over the
inferences run one at a time, not while a stream's frames overlap) and, with ``stream=N``,
the pipelined period (the model's ``period`` objective): MAPE, share within +-10 %, Spearman
and Kendall rank correlation
(:mod:`dse.fidelity.statistics`). Writes ``fidelity.csv``, ``fidelity.png`` and
``fidelity.json`` into the output directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from dse import app
from dse.config import AlgorithmConfig
from dse.errors import DseError
from dse.fidelity.choose import Chosen, choose
from dse.fidelity.measure import DEPLOYMENTS, measure, memory_baseline
from dse.fidelity.plot import plot, title
from dse.fidelity.report import FidelityDoc, figures, write_doc
from dse.fidelity.settings import FidelitySettings, out_dir, settings_from
from dse.fidelity.statistics import points
from dse.files import writable_dir
from dse.measuring.phase2 import csv_row, write_csv
from dse.net import Net
from dse.runtime.launch.mpiexec import mpiexec_path
from dse.search.problem import MappingProblem
from models_analytical.model import AnalyticalModel


@dataclass(frozen=True)
class FidelityReport:
    """Where the report went, and ``fidelity.json``'s contents."""

    out: Path
    doc: FidelityDoc


def draw(cfg: DictConfig, net: Net, model: AnalyticalModel, s: FidelitySettings) -> Chosen:
    """The mappings a run of ``cfg`` measures (:func:`~dse.fidelity.choose.choose` after a
    short search at the run's own search settings): the same ones each time for the same
    settings, code and coefficients."""
    problem = MappingProblem(app.chromosome_from(cfg, net, model), model, cfg.objectives)
    algorithm = replace(
        cast(AlgorithmConfig, OmegaConf.to_object(cfg.algorithm)),  # its structured schema
        pop_size=s.search_pop_size,
        n_gen=s.search_generations,
        max_evaluations=None,
    )
    return choose(problem, algorithm, s.mappings, s.seed)


def run_fidelity(cfg: DictConfig, tell: Callable[..., None]) -> FidelityReport:
    """The whole run for ``cfg`` (a composed ``fidelity`` config); ``tell(message,
    error=False)`` says what it starts. Ctrl-C during the rounds writes the report of what
    was measured, then raises KeyboardInterrupt."""
    s = settings_from(cfg)
    launcher = app.launcher_from(cfg)  # on an emulated platform: its cluster, which must be up
    mpiexec_path()
    started = time.perf_counter()
    net, platform, model = app.model_from(cfg)
    coefficients = model.coefficients
    out = writable_dir(out_dir(cfg, net.name, platform.name))  # before anything is measured
    tell(f"coefficients: {app.coefficients_origin(cfg, coefficients)}")
    unseen = app.unprofiled_warning(net, platform, coefficients)
    if unseen:
        tell(unseen)
    if not coefficients.calibrated or coefficients.quick:
        how = "a quick calibration (a smoke test)" if coefficients.quick else "not calibrated"
        tell(
            f"warning: coefficients {coefficients.source} are {how}: run "
            f"python -m dse.calibrate platform={platform.name} first",
            error=True,
        )
    chosen = draw(cfg, net, model, s)
    tell(f"measuring {len(chosen.labels)} mappings of {net.name} on {platform.name} into {out}")
    bar = tqdm(total=len(chosen.labels) * (s.rounds + 1), desc="fidelity", unit="run")

    def tick() -> None:  # a mapping whose rounds disagree runs one more: the total grows
        if bar.n >= bar.total:
            bar.total = bar.n + 1
        bar.update(1)

    measured = measure(out, net, model, chosen.mappings, chosen.labels, s, tick, launcher)
    bar.close()
    rows = [
        {**csv_row(label, result), "kind": kind}
        for label, kind, result in zip(chosen.labels, chosen.kinds, measured.results, strict=True)
    ]
    write_csv(out / "fidelity.csv", rows)
    pts = points(measured.results, chosen.kinds)
    if not pts.latency:
        if measured.interrupted:  # stopped before the first result: that, not a failure
            raise KeyboardInterrupt
        raise DseError(f"no mapping was measured (see {out}/{DEPLOYMENTS}/*/stderr.log)")
    plot(out / "fidelity.png", pts, title(net.name, platform.name, len(pts.latency), coefficients))
    f = figures(pts, measured.results)
    doc = FidelityDoc(
        net=net.name,
        platform=platform.name,
        coefficients=coefficients.source,
        calibrated=coefficients.calibrated,
        calibration=coefficients.calibration,
        latency=f.latency,
        latency_as_measured=f.latency_as_measured,
        drift=measured.speed,
        memory=f.memory,
        memory_baseline=memory_baseline(model, measured.start_rss_mb),
        period=f.period,
        period_as_measured=f.period_as_measured,
        stream=s.stream,
        failed=[r["mapping"] for r in rows if r["status"] != "ok"],
        warmup=s.warmup,
        iterations=s.iterations,
        rounds=s.rounds,
        seconds=round(time.perf_counter() - started, 1),
        energy="not measured (no counter readable here); modelled only",
        noise_floor_pct=f.noise_floor_pct,
        round_spread_pct=f.round_spread_pct,
        repeatability=f.repeatability,
        repeatability_adjusted=f.repeatability_adjusted,
        ran_again=measured.ran_again,
        interrupted=measured.interrupted,
    )
    write_doc(out / "fidelity.json", doc)
    if measured.interrupted:
        raise KeyboardInterrupt
    return FidelityReport(out, doc)
