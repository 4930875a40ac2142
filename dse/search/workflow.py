"""The search workflow: one exploration of a config, its outputs, then phase two when enabled.

``python -m dse`` parses the config and calls :func:`search`; everything after that is here:
the run directory (a new one, or a resumed run's own), the model and the problem, NSGA-II with
checkpoints, the outputs (:mod:`dse.results.outputs`), and the deployment and measurement of
the front's best mappings (phase two). A stop signal (Ctrl-C, SIGTERM) during the search ends
it after the current generation, with complete outputs and a checkpoint to resume from.

This module assembles the model (:mod:`dse.app`) and writes the outputs (:mod:`dse.results`),
so it sits in the workflows layer above the rest of :mod:`dse.search` (``tests/test_layers.py``).
It reads nothing of Hydra's or of the command line: the entry point hands it the job
(:class:`Job`), the command's run context and how to tell the user.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from dse import app
from dse.config import AlgorithmConfig, Phase2Config
from dse.context import INTERRUPTED, DeferredSignals, RunContext
from dse.errors import DseError
from dse.files import owned, remove_stale
from dse.net import Net
from dse.objectives import OBJECTIVES, fmt
from dse.paths import shown
from dse.platform import Platform
from dse.results import plot_worker, writers
from dse.results.outputs import write_outputs
from dse.runtime.launch.mpiexec import Launcher
from dse.search import checkpoint, nsga2
from dse.search.problem import MappingProblem
from dse.search.rehearsal import rehearse
from models_analytical import ahead
from models_analytical.schedule.kernel import kernel_in_cache

#: How the workflow tells the user something: a message, and whether it is an error (stderr).
Tell = Callable[..., None]


@dataclass(frozen=True)
class Job:
    """What the entry point knows of the job that runs the search."""

    out: Path  # the job's run directory (a resumed run writes into its own instead)
    multirun: bool  # one job of --multirun (a sweep): a stop ends it and the sweep
    overrides: list[str]  # the job's overrides (a resumed run refuses those that change it)
    started: float  # time.perf_counter() when the job started: the summary's wall time


@dataclass
class Prepared:
    """A search ready to run: the run's config (a resumed run's own), what it searches, and
    where a resumed search stands."""

    cfg: DictConfig
    net: Net
    platform: Platform
    problem: MappingProblem
    settings: AlgorithmConfig
    identity: dict[str, Any]  # what a checkpoint of this search must match to resume it
    stored: dict[str, Any]  # the config a checkpoint keeps
    launcher: Launcher | None  # phase two's (None without phase two)
    state: nsga2.SearchState | None  # a resumed search's state; None for a new search


class Progress:
    """A progress bar with the generation and the current best of each objective."""

    def __init__(self, state: nsga2.SearchState, enabled: bool) -> None:
        self.names = state.problem.objectives
        self.bar = tqdm(
            total=state.settings.n_gen,
            initial=state.generation,
            unit="gen",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def __call__(self, row: dict) -> None:
        bests = " ".join(f"{n}={row[f'best_{n}']:.4g}{OBJECTIVES[n].unit}" for n in self.names)
        self.bar.set_postfix_str(bests)
        self.bar.update(1)
        if row["generation"] % 10 == 0 or row["generation"] == self.bar.total:
            logging.getLogger("dse").info(
                f"generation {row['generation']}: {row['evaluations']} evaluations, "
                f"{row['feasible']} feasible, hypervolume {row['hypervolume']:.4f}, best {bests}"
            )

    def close(self) -> None:
        self.bar.close()


def first_run_notice(spatial: bool = False) -> None:
    """With row splits (``spatial``) and numba's cache cold for them, say why the first
    generations take long, before they start (stderr; reads one index file). The kernel
    without row splits has its notice when its compilation starts
    (:data:`models_analytical.ahead.NOTICE`)."""
    if spatial and kernel_in_cache(True) is False:
        print(
            "compiling the model's kernel for row splits once (numba, into its cache): a "
            "minute or more; later runs start in a few seconds",
            file=sys.stderr,
            flush=True,
        )


def search(cfg: DictConfig, job: Job, context: RunContext, tell: Tell) -> dict[str, Any]:
    """One exploration of ``cfg`` (or the run ``cfg.resume`` names, continued) in its run
    directory, which one process writes at a time; returns the run's result (bests,
    hypervolume, run directory) for a sweeper to optimise."""
    plot_worker.prestart()  # matplotlib imported by helpers while the search runs
    out = run_directory(cfg, job)
    with owned(out, "run directory"):
        return explore(cfg, out, job, context, tell)


def run_directory(cfg: DictConfig, job: Job) -> Path:
    """Where the run writes: the job's directory, or the resumed run's own (which must hold a
    checkpoint)."""
    if not cfg.get("resume"):
        return job.out
    if job.multirun:
        raise DseError("resume one run at a time, without --multirun")
    out = Path(str(cfg.resume)).expanduser()
    if not (out / checkpoint.CHECKPOINT).is_file():
        checkpoint.read(out)  # its one line: nothing to resume there
    return out


def prepare(cfg: DictConfig, out: Path, job: Job) -> Prepared:
    """The search of ``cfg``, or the one resumed from ``out``'s checkpoint, checked: a wrong
    setting, a cluster that is not up or a checkpoint of another search is one line here,
    before any generation."""
    resuming = bool(cfg.get("resume"))
    if resuming:
        meta, data = checkpoint.read(out)
        cfg = app.resumed_config(cfg, meta.config, job.overrides)
    net, platform, model = app.model_from(cfg)
    # phase two's launcher before the search: a cluster that is not up is one line, not a
    # surprise after the search
    launcher = app.launcher_from(cfg) if cfg.phase2.enabled else None
    chromosome = app.chromosome_from(cfg, net, model)
    problem = MappingProblem(chromosome, model, cfg.objectives, app.profiles_from(cfg, model))
    settings = cast(AlgorithmConfig, OmegaConf.to_object(cfg.algorithm))
    ident = checkpoint.identity(problem, net.fingerprint, platform.keys)
    stored = {k: v for k, v in app.plain(cfg).items() if k not in ("resume", "progress")}
    state = None
    if resuming:
        state = checkpoint.restore(meta, data, problem, settings, ident)
        nsga2.extend(state, settings.n_gen, settings.max_evaluations)
    return Prepared(cfg, net, platform, problem, settings, ident, stored, launcher, state)


def introduction(run: Prepared) -> str:
    """What runs, on what, with which coefficients: the run's first lines."""
    cfg, net, platform, problem, s = run.cfg, run.net, run.platform, run.problem, run.settings
    coeff = problem.model.coefficients
    return (
        f"{net.name} ({len(net.graph)} layers) on {platform.name} ({len(platform)} devices), "
        f"{cfg.chromosome.name} encoding ({problem.n_var} genes), objectives "
        f"{', '.join(problem.objectives)}; population {s.pop_size} x {s.n_gen} generations"
        + (f", at most {s.max_evaluations} evaluations" if s.max_evaluations else "")
        + f", seed {run.state.seed if run.state is not None else int(cfg.seed)}"
        + (f", resumed at generation {run.state.generation}" if run.state is not None else "")
        + f"\ncoefficients: {app.coefficients_origin(cfg, run.problem.model.coefficients)}"
        + (f"\n{unseen}" if (unseen := app.unprofiled_warning(net, platform, coeff)) else "")
    )


def explore(
    cfg: DictConfig, out: Path, job: Job, context: RunContext, tell: Tell
) -> dict[str, Any]:
    """The search of ``cfg`` (or the resumed run in ``out``), its outputs in ``out``, and phase
    two when enabled. A stop signal during the search, or while its outputs are written, ends
    the process with :data:`~dse.context.INTERRUPTED` after they are complete."""
    context.work_at_risk()
    run = prepare(cfg, out, job)
    cfg, problem = run.cfg, run.problem
    remove_stale(out)
    # before the first generation (a new search's first step is the hypervolume reference's
    # mappings): what runs, on what, with which coefficients
    tell(introduction(run))
    # after every check of the input: an error stays one line
    first_run_notice(bool(cfg.chromosome.spatial))
    if ahead.compiling():  # the search's kernels compile here while the model's compiles there
        rehearse(problem, run.settings, int(cfg.seed))
    ahead.wait()  # the model's kernel then comes from numba's cache, not compiled twice
    state = run.state
    if state is None:
        state = nsga2.new_search(problem, run.settings, int(cfg.seed))

    def save(s: nsga2.SearchState) -> None:
        checkpoint.save(s, out, run.identity, run.stored)

    with DeferredSignals() as signals:
        progress = Progress(state, bool(cfg.get("progress", True)))
        crashed: BaseException | None = None
        try:
            nsga2.run(state, progress, on_checkpoint=save, stop=signals.requested)
        except Exception as exc:  # noqa: BLE001 - keep what was computed, then re-raise
            crashed = exc
        finally:
            progress.close()
        if state.pop is None:
            if crashed:
                raise crashed
            raise DseError("stopped before the first generation finished: nothing to save")
        save(state)
        interrupted = signals.requested()
        summary = write_outputs(out, state, problem, run.platform, cfg, job.started, interrupted)
        # a signal while the outputs were written: they are complete; stop all the same (no
        # phase two, no further trial of a sweep)
        late = signals.requested() and not interrupted
        report = shown(out / "report.html")
        # a signal from here to the end of the process: the outputs are complete (one run;
        # a sweep's jobs end as before, "interrupted")
        if not crashed and not job.multirun:
            context.outputs_complete(
                f"interrupted after the outputs of generation {state.generation} were written "
                f"(they are complete; report: {report}); continue with: python -m dse "
                f"resume={out}"
            )
    if crashed:
        raise crashed
    if late:
        tell(
            f"interrupted while the outputs of generation {state.generation} were written (they "
            f"are complete; report: {report}); continue with: python -m dse resume={out}",
            error=True,
        )
        sys.exit(INTERRUPTED)
    if not summary["feasible"] and not interrupted:
        genes, _, _ = nsga2.front(state)
        raise DseError(
            f"no mapping fits in memory: the best attempt has "
            f"{writers.overflow(problem, run.platform, genes[0])}; its outputs in {out} are "
            f"marked infeasible, see {report} (add devices, raise memory_mb, or choose a "
            "smaller network)"
        )
    if interrupted:
        tell(
            f"interrupted after generation {state.generation}: the front and a checkpoint are "
            f"in {out} (report: {report}); continue with: python -m dse resume={out}",
            error=True,
        )
        sys.exit(INTERRUPTED)
    if cfg.phase2.enabled:  # deploy and measure the front's best mappings under MPI
        from dse.measuring.phase2 import latency_lines

        saved = context.work_at_risk()  # phase two's measurements: not yet complete
        began = time.perf_counter()
        rows = phase_two(out, run, state)
        seconds = time.perf_counter() - began
        summary = write_outputs(
            out, state, problem, run.platform, cfg, job.started, False, rows, seconds
        )
        context.outputs_complete(saved)
        ok = sum(r["status"] == "ok" for r in rows)
        tell(
            f"phase two: {ok} of {len(rows)} mappings measured in {summary['phase2_seconds']:.1f}"
            f" s -> {shown(out / 'phase2.csv')}\n"
            + "\n".join(f"  {line}" for line in latency_lines(rows))
        )
    tell(closing(summary, out, report))
    return {
        "status": "ok",
        "run_dir": str(out),
        "best": summary["best"],
        "hypervolume": summary["hypervolume"],
        "evaluations": summary["evaluations"],
        "wall_seconds": summary["wall_seconds"],
    }


def phase_two(out: Path, run: Prepared, state: nsga2.SearchState) -> list[dict[str, Any]]:
    """Deploy and measure the front's best mappings (``cfg.phase2``) with the run's launcher;
    returns phase2.csv's rows. The one call of phase two after a search."""
    # imported here: the runtime and onnxruntime, not needed by a search without phase two
    from dse.measuring.phase2 import phase2_after_search

    genes, F, _ = nsga2.front(state)
    settings = cast(Phase2Config, OmegaConf.to_object(run.cfg.phase2))
    return phase2_after_search(
        out, run.problem, genes, F, run.net, run.platform, settings, run.cfg.seed, run.launcher
    )


def closing(summary: dict[str, Any], out: Path, report: str) -> str:
    """The run's last lines: what ran and in how long (phase two's time apart from the
    search's), the best of each objective, why it stopped early if it did, and the report."""
    phase2 = summary.get("phase2_seconds")
    took = f"{summary['wall_seconds'] - (phase2 or 0.0):.1f} s" + (
        f" (then phase two: {phase2:.1f} s)" if phase2 is not None else ""
    )
    bests = "; ".join(
        f"best {n}: " + ", ".join(fmt(k, v) for k, v in b.items())
        for n, b in summary["best"].items()
    )
    stopped = f"\nstopped early: {summary['stopped_early']}" if summary["stopped_early"] else ""
    return (
        f"{summary['net']} / {summary['chromosome']}: {summary['generations']} generations, "
        f"{summary['evaluations']} evaluations in {took}, "
        f"{summary['pareto_points']} Pareto points -> {shown(out)}\n{bests}{stopped}\n"
        f"report: {report}"
    )
