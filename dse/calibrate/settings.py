"""A calibration's settings, resolved once from its config: ``quick=true`` acts here only."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypedDict

from omegaconf import DictConfig

from dse import app
from dse.errors import DseError
from dse.files import writable_file
from dse.net import zoo
from dse.paths import calibrated_path
from dse.platform import Platform
from dse.runtime.launch.mpiexec import Launcher
from models_analytical.coefficients import Coefficients, load_coefficients


class Quick(TypedDict):
    """The fields of :class:`CalibrationSettings` that ``quick=true`` sets (:data:`QUICK`)."""

    profile_runs: int
    channel_repeats: int
    part_repeats: int
    link_few_repeats: bool
    iterations: int
    rounds: int
    submodel_runs: int


#: What ``quick=true`` changes (a smoke test of every step, not for predictions): the first
#: network only, and these smaller numbers.
QUICK: Quick = {
    "profile_runs": 3,
    "channel_repeats": 4,
    "part_repeats": 2,
    "link_few_repeats": True,  # each link size exchanged a quarter as often (at least 3 times)
    "iterations": 3,
    "rounds": 1,
    "submodel_runs": 1,
}


@dataclass(frozen=True)
class CalibrationSettings:
    """Every number and input a calibration uses (defaults: :class:`dse.config.CalibrateConfig`)."""

    platform: Platform
    base: Coefficients  # the platform's own (uncalibrated) file: each type's start, its power
    nets: tuple[str, ...]  # profiled and deployed, in order
    seed: int
    out: Path  # the coefficients file written
    default_out: bool  # out is the platform's calibration file (later commands find it)
    quick: bool  # the smaller numbers of QUICK (the file says so)
    profile_runs: int  # profiled runs per network
    warmup: int  # warm-up runs before profiling, and iterations before each deployment's
    channel_repeats: int  # timed rounds of the one-Conv models
    part_repeats: int  # timed rounds of each layer alone as parts and as row bands
    link_few_repeats: bool  # the link benchmark's quick mode
    deployments: bool  # measure mappings under MPI (memory, sub-models, shared host, cuts)
    iterations: int  # measured iterations of a deployment per round
    rounds: int  # interleaved rounds over a network's deployments
    timeout_s: float  # a deployment's run past this fails the calibration
    submodel_runs: int  # timed rounds of the cut mappings' sub-models alone
    probe: bool  # a speed probe beside each deployment run
    # how the ranks start: on the platform's hosts by name, or on its emulated cluster
    launcher: Launcher = field(default_factory=Launcher)
    resume: bool = False  # take the journal's measurements, measure the rest
    refit: bool = False  # measure nothing: fit the journal's measurements


def base_coefficients(cfg: DictConfig) -> Coefficients:
    """The platform's own (uncalibrated) file, whatever ``coefficients=`` says."""
    cfg2 = cfg.copy()
    cfg2.coefficients = "platform"
    return load_coefficients(app.coefficients_path(cfg2))


def settings_from(cfg: DictConfig) -> CalibrationSettings:
    """The settings of ``cfg`` (a composed ``calibrate`` config), checked; with ``quick``,
    those of :data:`QUICK` and the first network only."""
    platform = app.platform_from(cfg)
    nets = tuple(str(n) for n in cfg.nets)
    unknown = [n for n in nets if n not in zoo.NETS]
    if unknown or not nets:
        raise DseError(
            f"nets: unknown network '{unknown[0] if unknown else ''}': choose from "
            f"{', '.join(zoo.NETS)}"
        )
    for key in ("runs", "channel_repeats", "part_repeats", "iterations", "rounds"):
        if int(cfg[key]) < 1:
            raise DseError(f"{key}={cfg[key]} must be at least 1")
    if int(cfg.submodel_runs) < 1 or int(cfg.warmup) < 0 or not float(cfg.timeout_s) > 0:
        raise DseError("submodel_runs must be at least 1, warmup 0 or more, timeout_s positive")
    base = base_coefficients(cfg)
    base.check_covers(platform)  # every type starts from its section (and keeps its power)
    given = cfg.get("out")
    settings = CalibrationSettings(
        platform=platform,
        base=base,
        nets=nets,
        seed=int(cfg.seed),
        # checked before minutes of measuring, not when the results are written
        out=writable_file(
            Path(str(given)).expanduser() if given else calibrated_path(platform.name)
        ),
        default_out=not given,
        quick=False,
        profile_runs=int(cfg.runs),
        warmup=int(cfg.warmup),
        channel_repeats=int(cfg.channel_repeats),
        part_repeats=int(cfg.part_repeats),
        link_few_repeats=False,
        deployments=bool(cfg.deployments),
        iterations=int(cfg.iterations),
        rounds=int(cfg.rounds),
        timeout_s=float(cfg.timeout_s),
        submodel_runs=int(cfg.submodel_runs),
        probe=bool(cfg.probe),
        # refit measures nothing: no cluster needs to be up
        launcher=Launcher() if cfg.get("refit") else app.launcher_from(cfg),
        resume=resume_flag(cfg.get("resume")),
        refit=bool(cfg.get("refit")),
    )
    return quick(settings) if cfg.quick else settings


def resume_flag(value: object) -> bool:
    """``resume=`` of a calibration: true or false (it resumes its own journal, beside out);
    anything else (a search's run directory) is one line."""
    if value is None or str(value).lower() in ("false", "0", "no", ""):
        return False
    if str(value).lower() in ("true", "1", "yes"):
        return True
    raise DseError(
        f"resume={value}: a calibration resumes the measurements beside its out= file: give "
        "resume=true"
    )


def quick(settings: CalibrationSettings) -> CalibrationSettings:
    """``settings`` for a smoke test: the first network and the numbers of :data:`QUICK`."""
    return replace(settings, quick=True, nets=settings.nets[:1], **QUICK)
