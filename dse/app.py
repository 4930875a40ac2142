"""The pieces of a run built from its config: network, platform, coefficients, model, chromosome,
and how the runtime's ranks start on the platform.

Every entry point composes the same config tree (``conf/`` + :mod:`dse.config`) and builds what
it needs here, so a setting means the same thing everywhere.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from chromosomes import Chromosome
from dse.cluster import launcher_for
from dse.config import BaseConfig, target_class
from dse.errors import DseError
from dse.net import Net, load_net
from dse.paths import CALIBRATION_ENV, CONF_DIR, calibrated_path, calibration_dir, shown
from dse.platform import Platform, PlatformFile, load_platform, read_platform
from dse.runtime.launch.mpiexec import Launcher
from dse.search.robust import Profiles
from models_analytical.coefficients import Coefficients, load_coefficients
from models_analytical.layer_costs import layer_key, unprofiled_ops
from models_analytical.model import AnalyticalModel


def calibration_of(platform_name: str) -> Path | None:
    """The calibration of platform ``platform_name`` when there is one, None when nothing is
    at its path; something there that is not a regular file (a directory, a broken link, a
    pipe) is one line, as a broken file is, not a silent fall back to the uncalibrated file."""
    env = os.environ.get(CALIBRATION_ENV)
    folder = calibration_dir()
    if env and folder.exists() and not folder.is_dir():
        raise DseError(
            f"{CALIBRATION_ENV}={env} is a file: it names the folder of the platforms' "
            f"calibrations (PLATFORM.json): set it to {folder.parent}, or pass "
            f"coefficients={env}"
        )
    path = calibrated_path(platform_name)
    if path.is_file():
        return path
    if not os.path.lexists(path):
        return None
    kind = "a directory" if path.is_dir() else "not a regular file"
    if not path.exists():
        kind = "a broken link"
    raise DseError(
        f"the calibration of platform '{platform_name}', {shown(path)}, is {kind}: remove it "
        f"and calibrate again (python -m dse.calibrate platform={platform_name}), or pass "
        "coefficients=platform"
    )


def plain(cfg: Any) -> Any:
    """A config node as plain Python containers."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def platform_from(cfg: DictConfig) -> Platform:
    raw = cfg.get("platform")
    if raw is None:
        raise DseError("no platform given: add platform=NAME (conf/platform/NAME.yaml)")
    return load_platform(plain(raw))


def launcher_from(cfg: DictConfig, required: bool = True) -> Launcher:
    """How the runtime's ranks start on the platform of ``cfg``: on its emulated cluster when
    it has an ``emulation:`` section (one line when the cluster is not up, unless not
    ``required``), else on its hosts by name (:func:`dse.cluster.launcher_for`)."""
    raw = plain(cfg.get("platform"))
    if not isinstance(raw, Mapping):
        raise DseError("no platform given: add platform=NAME (conf/platform/NAME.yaml)")
    return launcher_for(raw, required, platform_words(str(raw.get("name"))))


def platform_words(name: str) -> str:
    """How the platform named ``name`` was given on the command line: ``platform=FILE``, and
    ``platform.name=NAME`` when that renamed it (outside a Hydra run: ``platform=NAME``)."""
    try:
        choice = HydraConfig.get().runtime.choices.get("platform")
    except ValueError:  # no Hydra run: a library call
        choice = None
    if not choice or choice == name:
        return f"platform={name}"
    return f"platform={choice} platform.name={name}"


def coefficients_path(cfg: DictConfig) -> Path:
    """``coefficients=PATH`` if given; else the platform's calibration by ``dse.calibrate`` when
    there is one (:mod:`dse.paths`); else (or with ``coefficients=platform``) the file
    the platform config names (relative to ``conf/platform/``)."""
    given = str(cfg.get("coefficients") or "")
    if given and given != "platform":
        return Path(given).expanduser()
    raw = plain(cfg.get("platform"))
    if raw is None:
        raise DseError("no platform given: add platform=NAME (conf/platform/NAME.yaml)")
    platform = read_platform(raw)
    if not given and not _named(platform):
        calibrated = calibration_of(platform.name)
        if calibrated is not None:
            return calibrated
    if not platform.coefficients:
        raise DseError(
            "no coefficients for this platform: set coefficients=PATH or platform.coefficients"
        )
    path = Path(platform.coefficients).expanduser()
    return path if path.is_absolute() else CONF_DIR / "platform" / path


def _named(platform: PlatformFile) -> bool:
    """Whether the user named the platform's coefficients (``platform.coefficients=FILE``):
    the value differs from the shipped platform file's. A file named so wins over a
    calibration, as ``coefficients=PATH`` does."""
    shipped = CONF_DIR / "platform" / f"{platform.name}.yaml"
    try:
        original = yaml.safe_load(shipped.read_text()) if shipped.is_file() else None
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(original, Mapping) and original.get("coefficients") != platform.coefficients


def coefficients_from(cfg: DictConfig, platform: Platform) -> Coefficients:
    coefficients = load_coefficients(coefficients_path(cfg))
    coefficients.check_covers(platform)
    return coefficients


def coefficients_origin(cfg: DictConfig, coefficients: Coefficients) -> str:
    """Which coefficients a command uses, for the line it prints: the file by its path, how it
    was obtained (:attr:`~models_analytical.coefficients.Coefficients.calibration`; where and
    when, as the file records it) and the file's date where it records none."""
    path = coefficients_path(cfg)
    prov = coefficients.notes.get("provenance")
    prov = prov if isinstance(prov, dict) else {}
    when = _local_time(prov.get("date"))
    if when is None:
        try:
            stamp = datetime.datetime.fromtimestamp(path.stat().st_mtime)
            when = f"file of {stamp:%Y-%m-%d %H:%M}"
        except OSError:
            when = "file date unknown"
    kind = coefficients.calibration
    if coefficients.calibrated:
        host = f" on {prov['host']}" if prov.get("host") else ""
        kind = f"{kind}{host} {when}"
        if coefficients.quick:
            kind += "; not for predictions: calibrate without quick=true"
    elif path.resolve().is_relative_to(CONF_DIR.resolve()):
        kind = f"{kind}: shipped with dse, not measured on this hardware; {when}"
    else:
        kind = f"{kind}; {when}"
    return f"{shown(path)} ({kind})"


def unprofiled_warning(net: Net, platform: Platform, coefficients: Coefficients) -> str | None:
    """One line when calibration profiled no layer of some of the network's op types (their
    times are a family's regression or a default, fitted on other ops), naming them and the
    calibration that would measure them; None otherwise."""
    ops = unprofiled_ops(net.graph, coefficients)
    older = coefficients.calibrated and not any(k.profiled_ops for k in coefficients.types.values())
    if older:  # a file from before profiled_ops: its fits are of other families than today's
        keys = {key for k in coefficients.types.values() for key in k.layer_s}
        if all(layer_key(layer) in keys for layer in net.graph):
            return None
        return (
            f"warning: {net.name}'s layers that calibration did not profile are costed by fits "
            "made before dse costed layers by what bounds them (the file records no "
            f"profiled_ops): calibrate again (python -m dse.calibrate platform={platform.name})"
        )
    if not ops:
        return None
    named = ops[0] if len(ops) == 1 else f"{', '.join(ops[:-1])} and {ops[-1]}"
    with_it = net.name if net.path is None else str(net.path)
    if net.path is not None and net.input_shape is not None:
        shape = json.dumps(net.input_shape, separators=(",", ":")).replace('"', "")
        with_it = f"{{path:{net.path},input_shape:{shape}}}"
    return (
        f"warning: {net.name}'s {named} layers are costed by a default: calibration profiled "
        f"none; calibrate with this network (python -m dse.calibrate platform={platform.name} "
        f"nets=[...,{with_it}])"
    )


def _local_time(iso: Any) -> str | None:
    """``2026-05-09 14:02`` (local time) of an ISO 8601 date, None if it is not one."""
    try:
        stamp = datetime.datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    return f"{stamp.astimezone():%Y-%m-%d %H:%M}" if stamp.tzinfo else f"{stamp:%Y-%m-%d %H:%M}"


def model_from(cfg: DictConfig) -> tuple[Net, Platform, AnalyticalModel]:
    """The network, the platform and the analytical model scoring mappings of one on the other."""
    net = load_net(cfg.get("net"))
    platform = platform_from(cfg)
    coefficients = coefficients_from(cfg, platform)
    model = AnalyticalModel(net.graph, platform, coefficients, cfg.get("model_threads"))
    return net, platform, model


def profiles_from(cfg: DictConfig, model: AnalyticalModel) -> Profiles | None:
    """The model under each of the platform's profiles and ``cfg.robust``'s rule
    (:mod:`dse.search.robust`); None when the platform has no profiles, which ``robust=worst``
    or ``mean`` need (one line)."""
    rule = str(cfg.get("robust") or "none")
    platform = model.platform
    if not platform.profiles:
        if rule != "none":
            raise DseError(
                f"robust={rule} needs the platform's profiles, the conditions a plan must hold "
                f"under, and platform '{platform.name}' has none: add profiles: to its file "
                "(docs/reference/platforms.md), or drop robust"
            )
        return None
    return Profiles(model, rule)


def chromosome_from(cfg: DictConfig, net: Net, model: AnalyticalModel) -> Chromosome:
    """The encoding ``cfg.chromosome`` names (its ``_target_``), over this net and the model's
    platform; with ``chromosome.shares=speed`` split layers are sized to the devices, with
    ``chromosome.spatial=true`` they may split by rows too."""
    c = cfg.chromosome
    cls = target_class(str(c._target_), "chromosome")
    speed = model.device_speed() if c.get("shares", "equal") == "speed" else None
    return cls(
        net.graph,
        len(model.platform),
        splits=c.get("splits"),
        speed=speed,
        spatial=bool(c.get("spatial", False)),
    )


#: Settings a resumed run takes from the command line: how far it goes and how it reports.
RESUMABLE = ("resume", "progress", "algorithm.n_gen", "algorithm.max_evaluations")


def resumed_config(cfg: DictConfig, stored: dict, overrides: list[str]) -> DictConfig:
    """The run's own config (from its checkpoint) with only :data:`RESUMABLE` keys taken from
    the command line; any other override that changes a setting is refused in one line."""
    try:
        # merged onto a structured DictConfig: a DictConfig
        run_cfg = cast(DictConfig, OmegaConf.merge(OmegaConf.structured(BaseConfig), stored))
    except Exception as exc:  # noqa: BLE001 - OmegaConf validation errors are many classes
        raise DseError(f"the checkpoint's config is not valid: {exc}") from None
    for line in overrides:
        key = line.split("=", 1)[0].lstrip("+~").replace("/", ".")
        if key.startswith("hydra") or key in RESUMABLE:
            continue
        given = OmegaConf.select(cfg, key, default=None)
        had = OmegaConf.select(run_cfg, key, default=None)
        as_plain = [
            OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for v in (given, had)
        ]
        if as_plain[0] != as_plain[1]:
            raise DseError(
                f"resume continues the run with its own settings, but {line} changes "
                f"{key} (the run has {as_plain[1]!r}): drop it, or start a new run"
            )
    for key in RESUMABLE[1:]:
        if any(line.split("=", 1)[0].lstrip("+~") == key for line in overrides):
            OmegaConf.update(run_cfg, key, OmegaConf.select(cfg, key), merge=False)
    run_cfg.resume = cfg.resume
    return run_cfg
