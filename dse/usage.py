"""What ``--help`` and ``--version`` print for every entry point.

Each entry point has one :class:`Help` in :data:`HELP`: its usage line, a full sentence saying
what it does, the config groups and keys it reads (no others), and its page of the manual.
:func:`dse.cli.run` prints the page of a Hydra entry point before Hydra starts (Hydra's own are
``--hydra-help`` and a 90-line dump of the config); ``dse.compare`` and
``dse.config_reference`` give theirs to argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

#: The commands a user needs, for ``python -m dse --help``: (what, command).
COMMANDS = (
    ("explore", "python -m dse +net=vgg16 chromosome=advanced"),
    ("your own ONNX file", "python -m dse +net=onnx net.path=model.onnx"),
    (
        "evaluate a mapping",
        "python -m dse.evaluate +net=vgg16 mapping=RUN/best_latency/mapping.json "
        "horizontal=RUN/best_latency/horizontal.json",
    ),
    (
        "deploy and measure it",
        "python -m dse.deploy +net=vgg16 platform=localhost measure=true "
        "mapping=RUN/best_latency/mapping.json horizontal=RUN/best_latency/horizontal.json",
    ),
    ("calibrate this machine", "python -m dse.calibrate platform=localhost"),
    ("check the model (fidelity)", "python -m dse.fidelity +net=vgg16 platform=localhost"),
    (
        "sweep settings (Optuna)",
        "python -m dse --multirun +net=vgg16 hydra/sweeper=dse_optuna "
        "'chromosome=choice(naive,advanced)' hydra.sweeper.n_trials=20",
    ),
    ("compare runs", "python -m dse.compare runs/multirun/DATE/TIME-PID"),
)
#: Config groups, in the order a user chooses them (``net`` has no default: ``+net=``).
GROUPS = ("net", "platform", "chromosome", "algorithm", "algorithm/crossover", "algorithm/mutation")
#: Where the types, defaults and meanings of every key are.
REFERENCE = "docs/reference/config.md"
#: Width of a help page's wrapped lines.
WIDTH = 100


@dataclass(frozen=True)
class Help:
    """One entry point's ``--help``."""

    command: str  # the usage line, after "usage: "
    does: str  # a full sentence (or two): what the command does
    page: str  # its page of the manual (a file under docs/, with an anchor if need be)
    groups: tuple[str, ...] = ()  # the config groups it reads
    keys: tuple[str, ...] = ()  # the keys it reads beyond the groups' (phase2: all of phase2.*)
    schema: str = ""  # the structured config of those keys (a class of dse.config)


#: Each entry point's help, by its primary config's name (``conf/NAME.yaml``; ``config`` is
#: ``python -m dse``) or, for those without one, by its module's name.
HELP = {
    "config": Help(
        "python -m dse +net=NAME chromosome=advanced",
        "Explores the ways to split a network across the devices of a platform (mappings) with "
        "NSGA-II against the analytical model, and writes the Pareto front, the best mapping "
        "of each objective and a report into a run directory; with phase2.enabled=true it then "
        "deploys and measures the best mappings under MPI.",
        "docs/guides/exploring.md",
        GROUPS,
        ("seed", "objectives", "coefficients", "model_threads", "resume", "progress", "phase2"),
        "BaseConfig",
    ),
    "inspect": Help(
        "python -m dse.inspect +net=NAME [format=json]",
        "Prints a network's layers as dse sees them (op, output shape, MACs, parameters, how "
        "each may be split) and its totals.",
        "docs/guides/network-and-platform.md",
        ("net",),
        ("format",),
        "InspectConfig",
    ),
    "evaluate": Help(
        "python -m dse.evaluate +net=NAME mapping=FILE [horizontal=FILE] [platform=NAME]",
        "Scores one mapping (the AutoDiCE files a search writes) with the analytical model and "
        "prints its latency, memory and energy, per device and in total.",
        "docs/guides/results.md#score-a-mapping-dseevaluate",
        ("net", "platform"),
        ("mapping", "horizontal", "format", "coefficients", "model_threads"),
        "EvaluateConfig",
    ),
    "deploy": Help(
        "python -m dse.deploy +net=NAME mapping=FILE [horizontal=FILE] platform=NAME [out=DIR] "
        "[measure=true]",
        "Compiles one mapping into a sub-model per device and a plan that mpiexec runs, written "
        "to a deployment directory; with measure=true it runs the deployment under MPI and puts "
        "the measured latency and memory beside the model's.",
        "docs/guides/deploying.md",
        ("net", "platform"),
        ("mapping", "horizontal", "out", "measure", "warmup", "iterations", "timeout_s")
        + ("stream", "seed", "coefficients", "model_threads"),
        "DeployConfig",
    ),
    "calibrate": Help(
        "python -m dse.calibrate platform=NAME [nets=[...]] [quick=true] [out=FILE]",
        "Measures the platform's devices and links (profiled networks, layers as parts, links "
        "and deployments under MPI), fits the analytical model's coefficients to what it "
        "measured, and writes the coefficients file that later commands with this platform "
        "use.",
        "docs/guides/calibrating.md",
        ("platform",),
        ("nets", "runs", "warmup", "channel_repeats", "part_repeats", "deployments")
        + ("iterations", "rounds", "timeout_s", "submodel_runs", "quick", "probe", "out")
        + ("resume", "refit", "seed"),
        "CalibrateConfig",
    ),
    "fidelity": Help(
        "python -m dse.fidelity +net=NAME platform=NAME [mappings=30]",
        "Deploys and measures mappings of a network under MPI (the bests and a spread of a "
        "short search's front, then random ones) and reports how far the model's predicted "
        "latency and memory (and, with stream=N, pipelined period) are from the measured.",
        "docs/guides/calibrating.md#check-how-well-it-predicts",
        GROUPS,
        ("mappings", "warmup", "iterations", "rounds", "keep", "probe", "timeout_s", "stream")
        + ("search_pop_size", "search_generations", "out", "seed", "objectives")
        + ("coefficients", "model_threads"),
        "FidelityConfig",
    ),
    "cluster": Help(
        "python -m dse.cluster up|status|check|down platform=NAME [name=CLUSTER] | "
        "set platform=NAME [name=CLUSTER] (board=B rate_mbit=R | device=D share=S) | "
        "exec BOARD [name=CLUSTER] -- COMMAND...",
        "Builds (up), shows (status), measures again (check) or removes (down) an emulated edge "
        "cluster on this machine, made as root from the platform's emulation: section: boards "
        "in network namespaces, each with its own disk and sshd, shaped links, CPU shares and "
        "memory caps; set changes a board's port rate or a device's CPU share while ranks run "
        "on it; exec runs a command on a board over ssh, as on a real board.",
        "docs/guides/cluster.md",
        ("platform",),
        ("name", "check", "cpu_share", "cfs_period_us", "check_mb", "check_reps")
        + ("check_rounds", "check_chunk_ms", "tolerance", "format")
        + ("board", "rate_mbit", "device", "share"),
        "ClusterConfig",
    ),
    "serve": Help(
        "python -m dse.serve DIR [inputs=FOLDER out=FOLDER] [http=HOST:PORT] [key=value ...]",
        "Starts a deployment's ranks and serves it: with inputs=FOLDER, every image and array "
        "file of the folder once, each one's outputs to out=FOLDER, then the throughput and "
        "latency; without, an inference endpoint over HTTP until stopped.",
        "docs/guides/serving-batch.md",
    ),
    "compare": Help(
        "python -m dse.compare RUN_DIR [RUN_DIR ...] [-o comparison.png]",
        "Overlays the convergence (hypervolume by evaluations) of several runs of one problem "
        "in one figure, each labelled by the settings that differ between them.",
        "docs/guides/results.md#compare-runs",
    ),
    "config_reference": Help(
        "python -m dse.config_reference [--write | --check]",
        "Prints the configuration reference, every key of every entry point with its type, "
        "default and meaning as the structured configs declare them, or writes or checks its "
        "page.",
        "docs/reference/config.md",
    ),
}


def version() -> str:
    """``dse 0.1.0 (Python ..., numba ..., ...)``."""
    from importlib import metadata

    def of(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    deps = ", ".join(f"{n} {of(n)}" for n in ("numba", "onnxruntime", "hydra-core", "pymoo"))
    return f"dse {of('dse')} (Python {sys.version.split()[0]}, {deps})"


def module_of(name: str) -> str:
    """The command of the entry point :data:`HELP` names ``name``."""
    return "dse" if name == "config" else f"dse.{name}"


def manual(page: str) -> str:
    """The last line of every help: the entry point's page of the manual."""
    return f"Manual: {page}"


def described(name: str) -> str:
    """The sentence that begins entry point ``name``'s help, wrapped."""
    return textwrap.fill(HELP[name].does, WIDTH)


def yaml_value(value: Any) -> str:
    """A default as the command line writes it: null, true, [a,b], 600.0."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(yaml_value(v) for v in value) + "]"
    return str(value)


def key_defaults(schema: type, keys: tuple[str, ...]) -> list[str]:
    """``key=default`` of each of ``keys`` in the dataclass ``schema``; a key whose default is
    a dataclass (``phase2``) gives each of its keys."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out = []
    for key in keys:
        field = fields[key]
        factory = field.default_factory
        value = field.default if factory is dataclasses.MISSING else factory()
        if dataclasses.is_dataclass(value):
            out += [f"{key}.{k}" for k in key_defaults(type(value), tuple(vars(value)))]
        else:
            out.append(f"{key}={yaml_value(value)}")
    return out


def usage(name: str, choices: dict[str, list[str]]) -> str:
    """The ``--help`` page of the Hydra entry point ``name`` (a key of :data:`HELP`): its usage
    line, what it does, the commands a user needs (``python -m dse`` only), its groups
    (``choices``: each group's options) and keys with their defaults, and its manual page."""
    from dse import config

    h = HELP[name]
    lines = [f"usage: {h.command}", "", described(name), ""]
    if name == "config":
        lines.append("What you need (RUN: a run's directory, e.g. runs/DATE/TIME-PID):")
        width = max(len(w) for w, _ in COMMANDS)
        lines += [f"  {w:<{width}}  {c}" for w, c in COMMANDS]
        lines.append("")
    plus = "; a network with a plus: +net=NAME" if "net" in h.groups else ""
    lines.append(f"Config groups (group=option{plus}):")
    lines += [f"  {g}: {', '.join(choices[g])}" for g in h.groups]
    lines += ["", "Keys (key=value; the defaults shown):"]
    pairs = "  ".join(key_defaults(getattr(config, h.schema), h.keys))
    lines += textwrap.wrap(pairs, WIDTH, initial_indent="  ", subsequent_indent="  ")
    lines += [
        "",
        f"Types and meanings: {REFERENCE}; the whole config: python -m {module_of(name)} --cfg job",
        "Hydra's own flags: --hydra-help",
    ]
    if name != "config":
        lines.append("Every command: python -m dse --help")
    lines.append(manual(h.page))
    return "\n".join(lines)


def parser(name: str) -> argparse.ArgumentParser:
    """The argument parser of the entry point ``name`` that takes no config (``compare``,
    ``config_reference``): its help begins with what it does and ends with its manual page;
    argparse lists its options."""
    return argparse.ArgumentParser(
        prog=f"python -m {module_of(name)}",
        description=HELP[name].does,
        epilog=manual(HELP[name].page),
    )
