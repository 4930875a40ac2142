"""A calibration's settings, resolved once from its config: ``quick=true`` acts here only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from omegaconf import DictConfig, ListConfig, OmegaConf

from dse import app
from dse.errors import DseError
from dse.files import writable_file
from dse.net import Net, load_net, zoo
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
    # a network of nets that is an ONNX file: its net config (path, input_shape) by its name
    net_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    resume: bool = False  # take the journal's measurements, measure the rest
    refit: bool = False  # measure nothing: fit the journal's measurements


def base_coefficients(cfg: DictConfig) -> Coefficients:
    """The platform's own (uncalibrated) file, whatever ``coefficients=`` says."""
    cfg2 = cfg.copy()
    cfg2.coefficients = "platform"
    return load_coefficients(app.coefficients_path(cfg2))


def net_configs(entries: Any) -> dict[str, dict[str, Any]]:
    """The networks of ``nets=``, each a zoo name, an ONNX file's path (its inputs' shapes
    fixed in the file) or ``{path: FILE, input_shape: [...]}``, as net configs by the name
    the network loads under (:func:`dse.net.load_net`); one line for an entry that is none."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(entries, ListConfig | DictConfig):
        entries = OmegaConf.to_container(entries, resolve=True)
    for entry in entries or []:
        if isinstance(entry, str) and entry in (*zoo.NETS, *zoo.CALIBRATION_NETS):
            config: dict[str, Any] = {"name": entry}
        elif isinstance(entry, Mapping) and "path" in entry:
            config = {"name": "onnx", **{str(k): v for k, v in entry.items()}}
        elif isinstance(entry, str) and entry.endswith(".onnx"):
            config = {"name": "onnx", "path": entry}
        else:
            raise DseError(
                f"nets: '{entry}' is neither a zoo network ({', '.join(zoo.NETS)}) nor an ONNX "
                "file: give FILE.onnx, or {path: FILE.onnx, input_shape: [1,3,H,W]}"
            )
        if config["name"] == "onnx":
            config["path"] = str(Path(str(config["path"])).expanduser().absolute())
        try:
            name = load_net(config).name  # a file that cannot be loaded: its own line
        except DseError as exc:
            if "input_shape" in config or "dynamic shape" not in str(exc):
                raise
            path = config["path"]
            raise DseError(
                f"nets: {path} has an input of dynamic shape: give its shape, as "
                f"{{path: {path}, input_shape: [1,3,H,W]}}"
            ) from None
        if name in out:
            raise DseError(f"nets: two networks are named '{name}': rename one file")
        out[name] = config
    if not out:
        raise DseError(f"nets is empty: name networks of the zoo ({', '.join(zoo.NETS)}) or files")
    return out


def net_of(s: CalibrationSettings, name: str) -> Net:
    """The network ``name`` of ``s.nets``, loaded."""
    return load_net(dict(s.net_configs.get(name, {"name": name})))


def net_request(s: CalibrationSettings, name: str) -> dict[str, Any]:
    """How a unit's request names the network ``name`` (:func:`dse.calibrate.ondevice.
    net_of_request`): by name, and an ONNX file's net config with it."""
    config = s.net_configs.get(name)
    return {"net": name, **({"net_config": dict(config)} if config else {})}


def settings_from(cfg: DictConfig) -> CalibrationSettings:
    """The settings of ``cfg`` (a composed ``calibrate`` config), checked; with ``quick``,
    those of :data:`QUICK` and the first network only."""
    platform = app.platform_from(cfg)
    configs = net_configs(cfg.nets)
    nets = tuple(configs)
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
        net_configs={k: v for k, v in configs.items() if v["name"] == "onnx"},
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
