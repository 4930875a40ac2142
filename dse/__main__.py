"""`python -m dse +net=NAME chromosome=advanced`: explore hybrid mappings with NSGA-II."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    import sys

    from dse.cli import PRINTS_AND_EXITS, stop_early_on_signals

    stop_early_on_signals()
    # a search (not a page: --help, --cfg ...): the model's kernel compiles ahead, in a child
    # process, while this one starts (a first run only: models_analytical.ahead)
    if not PRINTS_AND_EXITS.intersection(sys.argv[1:]):
        from models_analytical import ahead

        if ahead.start():
            print(ahead.NOTICE, file=sys.stderr, flush=True)

import logging
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from dse import app, cli
from dse.cli import INTERRUPTED, DeferredSignals, fail, guarded, run, say
from dse.config import check
from dse.errors import DseError
from dse.files import owned, remove_stale
from dse.objectives import OBJECTIVES, fmt
from dse.paths import CONF_DIR, shown
from dse.results import plot_worker, writers
from dse.results.outputs import write_outputs
from dse.search import checkpoint, nsga2
from dse.search.problem import MappingProblem
from dse.search.rehearsal import rehearse
from models_analytical import ahead
from models_analytical.schedule.kernel import kernel_in_cache

#: What compiling the model's kernel for row splits costs, once (benchmarks/bench_first_run.py
#: with chromosome.spatial=true).
ROWS_COMPILE = "85 s"


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


def resume_args(argv: list[str]) -> list[str]:
    """A resumed run writes into its own directory, not a new one: add hydra.run.dir."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("resume=")]
    if given and given[-1]:
        where = Path(given[-1]).expanduser()
        if where.exists() and not where.is_dir():
            fail(
                f"resume={given[-1]} is a file: give the run's directory (the one holding "
                "checkpoint.npz)"
            )
    if not given or any(a.startswith("hydra.run.dir=") for a in argv):
        return argv
    if "-m" in argv or "--multirun" in argv:
        return argv
    return [*argv, f"hydra.run.dir={given[-1]}", "hydra.output_subdir=null"]


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    """One exploration; returns the run's result (bests, hypervolume, run directory) so a
    sweeper can optimise it."""
    started = time.perf_counter()
    check(cfg)
    plot_worker.prestart()  # matplotlib imported by helpers while the search runs
    if cfg.get("resume"):
        if HydraConfig.get().mode.name == "MULTIRUN":
            raise DseError("resume one run at a time, without --multirun")
        out = Path(str(cfg.resume)).expanduser()
        if not (out / checkpoint.CHECKPOINT).is_file():
            checkpoint.read(out)  # its one line: nothing to resume there
    else:
        out = Path(HydraConfig.get().runtime.output_dir)
    with owned(out, "run directory"):  # one process writes a run directory
        return explore(cfg, out, started)


def first_run_notice(spatial: bool = False) -> None:
    """With row splits (``spatial``) and numba's cache cold for them, say why the first
    generations take long, before they start (stderr; reads one index file). The kernel
    without row splits has its notice when its compilation starts
    (:data:`models_analytical.ahead.NOTICE`)."""
    if spatial and kernel_in_cache(True) is False:
        print(
            "compiling the model's kernel for row splits once (numba, into its cache): about "
            f"{ROWS_COMPILE} on an idle 2-core machine; later runs start in a few seconds",
            file=sys.stderr,
            flush=True,
        )


def explore(cfg: DictConfig, out: Path, started: float) -> dict[str, Any]:
    """The search of ``cfg`` (or the resumed run in ``out``), its outputs in ``out``, and phase
    two when enabled."""
    cli.SAVED_WORK = None
    if cfg.get("resume"):
        meta, data = checkpoint.read(out)
        cfg = app.resumed_config(cfg, meta["config"], list(HydraConfig.get().overrides.task))
    net, platform, model = app.model_from(cfg)
    # phase two's launcher before the search: a cluster that is not up is one line, not a
    # surprise after the search
    launcher = app.launcher_from(cfg) if cfg.phase2.enabled else None
    problem = MappingProblem(app.chromosome_from(cfg, net, model), model, cfg.objectives)
    settings = OmegaConf.to_object(cfg.algorithm)
    ident = checkpoint.identity(problem, net.fingerprint, platform.keys)
    stored = {k: v for k, v in app.plain(cfg).items() if k not in ("resume", "progress")}
    if cfg.get("resume"):
        state = checkpoint.restore(meta, data, problem, settings, ident)
        nsga2.extend(state, settings.n_gen, settings.max_evaluations)
    remove_stale(out)
    # before the first generation (a new search's first step is the hypervolume reference's
    # mappings): what runs, on what, with which coefficients
    say(
        f"{net.name} ({len(net.graph)} layers) on {platform.name} ({len(platform)} devices), "
        f"{cfg.chromosome.name} encoding ({problem.n_var} genes), objectives "
        f"{', '.join(problem.objectives)}; population {settings.pop_size} x "
        f"{settings.n_gen} generations"
        + (f", at most {settings.max_evaluations} evaluations" if settings.max_evaluations else "")
        + f", seed {state.seed if cfg.get('resume') else int(cfg.seed)}"
        + (f", resumed at generation {state.generation}" if cfg.get("resume") else "")
        + f"\ncoefficients: {app.coefficients_origin(cfg, model.coefficients)}"
    )
    # after every check of the input: an error stays one line
    first_run_notice(bool(cfg.chromosome.spatial))
    if ahead.compiling():  # the search's kernels compile here while the model's compiles there
        rehearse(problem, settings, int(cfg.seed))
    ahead.wait()  # the model's kernel then comes from numba's cache, not compiled twice
    if not cfg.get("resume"):
        state = nsga2.new_search(problem, settings, int(cfg.seed))

    def save(s: nsga2.SearchState) -> None:
        checkpoint.save(s, out, ident, stored)

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
        summary = write_outputs(out, state, problem, platform, cfg, started, interrupted)
        # a signal while the outputs were written: they are complete; stop all the same (no
        # phase two, no further trial of a sweep)
        late = signals.requested() and not interrupted
        report = shown(out / "report.html")
        # a signal from here to the end of the process: the outputs are complete (one run;
        # a sweep's jobs end as before, "interrupted")
        if not crashed and HydraConfig.get().mode.name != "MULTIRUN":
            cli.SAVED_WORK = (
                f"interrupted after the outputs of generation {state.generation} were written "
                f"(they are complete; report: {report}); continue with: python -m dse "
                f"resume={out}"
            )
    if crashed:
        raise crashed
    if late:
        say(
            f"interrupted while the outputs of generation {state.generation} were written (they "
            f"are complete; report: {report}); continue with: python -m dse resume={out}",
            error=True,
        )
        sys.exit(INTERRUPTED)
    if not summary["feasible"] and not interrupted:
        genes, _, _ = nsga2.front(state)
        raise DseError(
            f"no mapping fits in memory: the best attempt has "
            f"{writers.overflow(problem, platform, genes[0])}; its outputs in {out} are marked "
            f"infeasible, see {report} (add devices, raise memory_mb, or choose a smaller "
            "network)"
        )
    if interrupted:
        say(
            f"interrupted after generation {state.generation}: the front and a checkpoint are "
            f"in {out} (report: {report}); continue with: python -m dse resume={out}",
            error=True,
        )
        sys.exit(INTERRUPTED)
    if cfg.phase2.enabled:  # deploy and measure the front's best mappings under MPI
        # only for phase two: the runtime and onnxruntime, 0.19 s of a search's start
        from dse.measuring.phase2 import phase2_after_search

        genes, F, _ = nsga2.front(state)
        phase2 = OmegaConf.to_object(cfg.phase2)
        saved, cli.SAVED_WORK = cli.SAVED_WORK, None  # phase two's measurements: not yet
        rows = phase2_after_search(
            out, problem, genes, F, net, platform, phase2, cfg.seed, launcher
        )
        summary = write_outputs(out, state, problem, platform, cfg, started, False, rows)
        cli.SAVED_WORK = saved
        ok = sum(r["status"] == "ok" for r in rows)
        say(f"phase two: {ok} of {len(rows)} mappings measured -> {shown(out / 'phase2.csv')}")
    bests = "; ".join(
        f"best {n}: " + ", ".join(fmt(k, v) for k, v in b.items())
        for n, b in summary["best"].items()
    )
    stopped = f"\nstopped early: {summary['stopped_early']}" if summary["stopped_early"] else ""
    say(
        f"{summary['net']} / {summary['chromosome']}: {summary['generations']} generations, "
        f"{summary['evaluations']} evaluations in {summary['wall_seconds']:.1f} s, "
        f"{summary['pareto_points']} Pareto points -> {shown(out)}\n{bests}{stopped}\n"
        f"report: {report}"
    )
    return {
        "status": "ok",
        "run_dir": str(out),
        "best": summary["best"],
        "hypervolume": summary["hypervolume"],
        "evaluations": summary["evaluations"],
        "wall_seconds": summary["wall_seconds"],
    }


if __name__ == "__main__":
    sys.argv = [sys.argv[0], *resume_args(sys.argv[1:])]
    run(main)
