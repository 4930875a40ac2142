"""What ``--help`` and ``--version`` print for every entry point (:func:`dse.cli.run` calls them
before Hydra, whose own pages are ``--hydra-help`` and a 90-line dump of the config)."""

from __future__ import annotations

import sys

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


def usage(doc: str | None, config_name: str, choices: dict[str, list[str]]) -> str:
    """The ``--help`` page of an entry point: its usage line and what it does (the first line
    of its module docstring), the commands a user needs (``python -m dse``), the groups
    (``choices``: each group's options)."""
    first = (doc or "").strip().splitlines()[0] if doc else ""
    command, _, what = first.partition("`: ")
    lines = [f"usage: {command.strip('`')}", "", what.strip() or first, ""]
    if config_name == "config":
        lines.append("What you need (RUN: a run's directory, e.g. runs/DATE/TIME-PID):")
        width = max(len(w) for w, _ in COMMANDS)
        lines += [f"  {w:<{width}}  {c}" for w, c in COMMANDS]
        lines.append("")
    else:
        lines += ["Every command: python -m dse --help", ""]
    lines.append("Config groups (group=option; a network with a plus: +net=NAME):")
    lines += [f"  {g}: {', '.join(options)}" for g, options in choices.items()]
    module = "dse" if config_name == "config" else f"dse.{config_name}"
    lines += [
        "",
        f"Every key and its default: python -m {module} --cfg job (types and meanings: "
        "dse/config.py). Hydra's own flags: --hydra-help.",
    ]
    return "\n".join(lines)
