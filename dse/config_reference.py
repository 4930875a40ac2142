"""`python -m dse.config_reference [--write | --check]`: the configuration reference, generated.

Every key of every entry point, with its type, its default and what it means, is read from the
structured configs themselves: the dataclasses of :mod:`dse.config` and of the Optuna sweeper
(``hydra_plugins/dse_optuna_sweeper/config.py``). A key's type is its annotation as written, its
default the dataclass's, its meaning the comments beside it and right above it in the source
(and a class's docstring). Which schema an entry point composes, and which option of each group
it starts from, come from the primary configs' defaults lists (``conf/*.yaml``); the groups'
options from Hydra's ConfigStore (what :func:`dse.config.register` stores) and ``conf/platform/``.

The page is ``docs/reference/config.md``. It is committed, so the manual builds without running
code, and ``tests/docs/test_reference.py`` fails when it differs from what this module gives now:
change a default or a comment in a config dataclass, then run ``--write``.

This module is documentation tooling, the top of the layers (``tests/test_layers.py``): it
reads the sweeper's config beside dse's, and nothing imports it.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import ast
import dataclasses
import inspect
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import yaml
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

import hydra_plugins.dse_optuna_sweeper.config as sweeper_config
from dse import config, usage
from dse.paths import CONF_DIR
from dse.platform import load_platform

#: The committed page, relative to the repository's root.
PAGE = Path("docs/reference/config.md")
ROOT = CONF_DIR.parent
#: Primary configs (conf/NAME.yaml) in the order a user meets their entry points.
ENTRY_POINTS = ("config", "inspect", "evaluate", "deploy", "calibrate", "fidelity", "cluster")
#: Config groups of the main tree whose options are structured configs, in the page's order.
GROUPS = ("net", "chromosome", "algorithm", "algorithm/crossover", "algorithm/mutation")
#: Fields that are Hydra's machinery, not settings.
HIDDEN = ("_target_", "defaults")
#: What a key means where its dataclass has no comment for it yet: (class name, key) -> text.
#: A key may not have both (:func:`check_notes`): once the source says it, delete it here.
NOTES = {
    ("BaseConfig", "net"): "the network: `+net=NAME` (a zoo network) or `+net=onnx net.path=FILE`",
    ("BaseConfig", "platform"): "the hardware: `platform=NAME`, the file conf/platform/NAME.yaml",
    ("BaseConfig", "chromosome"): "the encoding: `chromosome=advanced`, `naive` or `vertical`",
    ("BaseConfig", "algorithm"): "the search's settings and operators (NSGA-II)",
    ("BaseConfig", "seed"): "the random seed of the search, of the zoo's weights and of a"
    " deployment's input: the same seed and config give the same front",
    ("BaseConfig", "objectives"): "what the search minimises, from dse/objectives.py: latency,"
    " memory, energy, total_energy, bytes, period",
    ("BaseConfig", "phase2"): "deploy and measure mappings after the search: the `phase2` keys",
    ("NetConfig", "measure_seconds"): "the wall-clock time that run may take (s)",
    ("ChromosomeConfig", "name"): "the encoding (set by the option)",
    ("AlgorithmConfig", "name"): "the algorithm (set by the option)",
    ("AlgorithmConfig", "n_gen"): "generations",
    ("AlgorithmConfig", "crossover"): "the crossover: the group `algorithm/crossover`",
    ("AlgorithmConfig", "mutation"): "the mutation: the group `algorithm/mutation`",
    ("OperatorConfig", "name"): "the operator (set by the option)",
    ("Phase2Config", "enabled"): "deploy and measure after the search",
    ("FidelityConfig", "warmup"): "iterations run before measuring, per run",
    ("FidelityConfig", "timeout_s"): "a run past this is stopped and marked failed (s)",
    ("FidelityConfig", "search_generations"): "generations of that short search",
    ("ClusterConfig", "platform"): "the platform whose `emulation:` section the cluster is"
    " built from: `platform=NAME`",
    ("DseOptunaSweeperConf", "sampler"): "the Optuna sampler: the group `hydra/sweeper/sampler`",
}


def command(name: str) -> str:
    """The command line of the entry point whose primary config is conf/NAME.yaml."""
    return "python -m dse" if name == "config" else f"python -m dse.{name}"


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a schema: its name, type as annotated, default as YAML, and meaning."""

    name: str
    type: str
    default: str
    meaning: str


def comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line (without ``#``, ``#:`` and spaces)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#:").strip()
    return out


def field_notes(cls: type) -> dict[str, str]:
    """Field name -> its comment: the comment lines right above the field (no blank line
    between), then the comments on the field's own lines."""
    source = inspect.getsource(sys.modules[cls.__module__])
    notes = comments(source)
    lines = source.splitlines()
    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    out = {}
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        above: list[str] = []
        row = item.lineno - 1  # 1-based line just above the field
        while row >= 1 and lines[row - 1].strip().startswith("#"):
            above.insert(0, notes[row])
            row -= 1
        end = item.end_lineno or item.lineno
        own = [notes[r] for r in range(item.lineno, end + 1) if r in notes]
        parts = [" ".join(above), " ".join(own)]
        out[item.target.id] = ": ".join(p for p in parts if p)
    return out


def written_types(cls: type) -> dict[str, str]:
    """Field name -> its annotation as written in the source (``int | None``)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(inspect.getsource(sys.modules[klass.__module__]))
        node = next(
            n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == klass.__name__
        )
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                out[item.target.id] = ast.unparse(item.annotation)
    return out


def as_yaml(value: Any) -> str:
    """A default as a user writes it on the command line."""
    if value is MISSING or value == "???":
        return "required"
    if dataclasses.is_dataclass(value):
        name = getattr(value, "name", None)
        return f"`{name}`" if isinstance(name, str) else "its keys below"
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return f"`{text.removesuffix('...').strip()}`"


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return MISSING


def source_notes(cls: type) -> dict[str, str]:
    """Field name -> its comment in the source, for a schema and the classes it extends."""
    notes: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            notes.update({k: v for k, v in field_notes(klass).items() if v})
    return notes


def note(cls: type, name: str, notes: dict[str, str]) -> str:
    """A key's meaning: its comment in the source, else :data:`NOTES`' (looked up along the
    class's bases)."""
    if notes.get(name):
        return notes[name]
    for klass in cls.__mro__:
        if (klass.__name__, name) in NOTES:
            return NOTES[klass.__name__, name]
    return ""


def check_notes(classes: list[type]) -> list[str]:
    """What is wrong with :data:`NOTES`: an entry naming no key of these classes, or a key the
    source already comments."""
    wrong = []
    by_name = {c.__name__: c for c in classes}
    for cls_name, key in NOTES:
        cls = by_name.get(cls_name)
        if cls is None or key not in {f.name for f in dataclasses.fields(cls)}:
            wrong.append(f"NOTES names {cls_name}.{key}, which is no key of a schema")
        elif field_notes(cls).get(key):
            wrong.append(f"{cls_name}.{key} has a comment in the source: remove it from NOTES")
    return wrong


def schemas() -> list[type]:
    """Every schema the page documents."""
    config.register()
    found = [schema(name) for name in ENTRY_POINTS]
    found += [config.NetConfig, config.ChromosomeConfig, config.AlgorithmConfig]
    found += [config.OperatorConfig, config.Phase2Config]
    return [*found, sweeper_config.DseOptunaSweeperConf, sweeper_config.SamplerConf]


def keys(cls: type, own_only: bool = False) -> list[Key]:
    """The keys of a schema (its own fields only, when ``own_only``), in declaration order."""
    notes = source_notes(cls)
    types = written_types(cls)
    inherited = set()
    if own_only:
        for base in cls.__mro__[1:]:
            if dataclasses.is_dataclass(base):
                inherited |= {f.name for f in dataclasses.fields(base)}
    out = []
    for f in dataclasses.fields(cls):
        if f.name in HIDDEN or f.name in inherited:
            continue
        out.append(Key(f.name, types[f.name], as_yaml(default_of(f)), note(cls, f.name, notes)))
    return out


def doc(cls: type) -> str:
    """A class's own docstring as one paragraph ('' for a dataclass's generated one)."""
    text = cls.__dict__.get("__doc__") or ""
    if text.startswith(f"{cls.__name__}("):
        return ""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    return " ".join(inspect.cleandoc(text).split())


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: list[Key], prefix: str = "") -> list[str]:
    out = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for k in rows:
        out.append(
            f"| `{prefix}{k.name}` | `{cell(k.type)}` | {cell(k.default)} | {cell(k.meaning)} |"
        )
    return out


def defaults_list(name: str) -> list[Any]:
    return yaml.safe_load((CONF_DIR / f"{name}.yaml").read_text()).get("defaults", [])


def schema(name: str) -> type:
    """The dataclass an entry point's primary config extends (its ``base_*`` default)."""
    store = ConfigStore.instance()
    bases = [d for d in defaults_list(name) if isinstance(d, str) and d.startswith("base_")]
    if not bases:  # the main tree: conf/config.yaml extends base_config
        bases = ["base_config"]
    cls = OmegaConf.get_type(store.load(f"{bases[-1]}.yaml").node)
    assert cls is not None  # config.register stores each base_* as a dataclass
    return cls


def group_defaults() -> dict[str, str]:
    """Group -> the option conf/config.yaml (and each group's schema) starts from."""
    out = {}
    for d in defaults_list("config"):
        if isinstance(d, dict):
            ((group, option),) = d.items()
            if not str(group).startswith("override"):
                out[str(group)] = str(option)
    for d in config.AlgorithmConfig().defaults:
        if isinstance(d, dict):
            ((group, option),) = d.items()
            out[f"algorithm/{group}"] = option
    return out


def options(group: str) -> dict[str, Any]:
    """Option name -> its stored node (a DictConfig of the group's schema)."""
    store = ConfigStore.instance()
    return {
        n.removesuffix(".yaml"): store.load(f"{group}/{n}").node
        for n in store.list(group)
        if n.endswith(".yaml")  # not its subgroups (algorithm/crossover)
    }


def option_rows(group: str) -> list[str]:
    """A table of a group's options and what each sets beyond its schema's defaults."""
    found = options(group)
    first = next(iter(found.values()))
    cls = OmegaConf.get_type(first)
    base = {f.name: default_of(f) for f in dataclasses.fields(cls)} if cls else {}
    out = ["| option | sets |", "|---|---|"]
    for name, node in found.items():
        values = cast("dict[str, Any]", OmegaConf.to_container(node))  # a group's option
        sets = [
            f"`{k}={as_yaml(v).strip('`')}`"
            for k, v in values.items()
            if k not in HIDDEN
            and k != "name"
            and not dataclasses.is_dataclass(base.get(k))  # a group: its own section
            and (k not in base or base[k] != v)
        ]
        out.append(f"| `{name}` | {', '.join(sets) or 'the defaults'} |")
    return out


def first_sentence(path: Path) -> str:
    """The first sentence of a YAML file's header comment."""
    text = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text.append(line.lstrip("#").strip())
    words = " ".join(text)
    end = words.find(". ")
    return words if end < 0 else words[: end + 1]


def platform_rows() -> list[str]:
    out = [
        "| option | devices | boards | network | coefficients | what it is |",
        "|---|---|---|---|---|---|",
    ]
    for path in sorted((CONF_DIR / "platform").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        p = load_platform(raw)
        out.append(
            f"| `{path.stem}` | {len(p)} | {len(p.hosts)} | `{p.network}` | "
            f"`{raw.get('coefficients')}` | {cell(first_sentence(path))} |"
        )
    return out


def section(title: str, cls: type, prefix: str, intro: str = "") -> Iterator[str]:
    yield f"### `{prefix.rstrip('.') or title}`"
    yield ""
    text = " ".join(t for t in (intro, doc(cls)) if t)
    if text:
        yield text
        yield ""
    yield f"Schema: `{cls.__module__}.{cls.__name__}`."
    yield ""
    yield from table(keys(cls), prefix)
    yield ""


def render() -> str:
    """The whole page, Markdown."""
    config.register()
    chosen = group_defaults()
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m dse.config_reference --write` from the config dataclasses:",
        "     do not edit by hand. tests/docs/test_reference.py fails when it is out of date. -->",
        "",
        "Every key of every entry point, with its type, its default and what it means, generated"
        " from the structured configs in `dse/config.py` and"
        " `hydra_plugins/dse_optuna_sweeper/config.py` (`python -m dse.config_reference"
        " --write`). Set a key on the command line as `key=value` (`algorithm.pop_size=200`),"
        " choose a group's option as `group=option` (`chromosome=naive`), and add the network,"
        " which has no default, as `+net=NAME`. `python -m dse +net=vgg16 --cfg job` prints the"
        " composed configuration of a run. `required` marks a key without a default; `null`"
        " means none (Python's `None`).",
        "",
        "## Entry points",
        "",
        "Each entry point composes `conf/NAME.yaml`: the schema below, and the groups' options"
        " it starts from.",
        "",
        "| command | primary config | schema | keys |",
        "|---|---|---|---|",
    ]
    base = config.BaseConfig
    for name in ENTRY_POINTS:
        cls = schema(name)
        own = [k.name for k in keys(cls, own_only=True)] if cls is not base else []
        inherits = issubclass(cls, base) and cls is not base
        what = ", ".join(f"`{k}`" for k in own)
        if inherits:
            what = f"those of `python -m dse`, and {what}" if what else "those of `python -m dse`"
        elif cls is base:
            what = "[below](#python-m-dse)"
        else:
            what = ", ".join(f"`{k.name}`" for k in keys(cls))
        lines.append(f"| `{command(name)}` | `conf/{name}.yaml` | `{cls.__name__}` | {what} |")
    lines += [
        "",
        "Groups and the option each starts from: "
        + ", ".join(f"`{g}={o}`" for g, o in chosen.items())
        + ", and `net` has none: `+net=NAME` adds it.",
        "",
        "## `python -m dse`",
        "",
        doc(base),
        "",
        *table(keys(base)),
        "",
        "`net`, `chromosome` and `algorithm` are the groups below; `phase2` is a section of its"
        " own; `platform` is a platform file (`conf/platform/`).",
        "",
        "## Groups",
        "",
    ]
    for group in GROUPS:
        node = next(iter(options(group).values()))
        option_type = OmegaConf.get_type(node)
        assert option_type is not None  # config.register stores each option as a dataclass
        start = chosen.get(group)
        plus = "+" if group == "net" else ""  # no default: the option is added
        intro = f"Options: `{plus}{group}=NAME`" + (f", default `{start}`." if start else ".")
        lines += list(section(group, option_type, group.replace("/", ".") + ".", intro))
        lines += option_rows(group)
        lines.append("")
    lines += [
        "### `platform`",
        "",
        "Options: `platform=NAME`, a file `conf/platform/NAME.yaml`, default"
        f" `{chosen.get('platform')}`. A platform is hardware, not settings: its keys are in"
        " [Platform files](platforms.md).",
        "",
        *platform_rows(),
        "",
        "### `phase2`",
        "",
        *list(section("phase2", config.Phase2Config, "phase2."))[2:],
        "## The other entry points",
        "",
        "Each also takes the keys of `python -m dse` it uses (`+net`, `platform`, `seed`,"
        " `coefficients`, ...); here are its own.",
        "",
    ]
    for name in ENTRY_POINTS[1:]:
        cls = schema(name)
        rows = keys(cls, own_only=issubclass(cls, base))
        lines += [f"### `{command(name)}`", ""]
        text = doc(cls)
        if text:
            lines += [text, ""]
        lines += [f"Schema: `{cls.__module__}.{cls.__name__}`.", "", *table(rows), ""]
    sweeper = sweeper_config.DseOptunaSweeperConf
    sampler = sweeper_config.SamplerConf
    lines += [
        "## The Optuna sweeper (`hydra/sweeper=dse_optuna`)",
        "",
        "`python -m dse --multirun hydra/sweeper=dse_optuna ...`: see"
        " [Sweeping settings with Optuna](../guides/sweeping.md).",
        "",
        f"Schema: `{sweeper.__module__}.{sweeper.__name__}`.",
        "",
        *table(keys(sweeper), "hydra.sweeper."),
        "",
        "Samplers: `hydra/sweeper/sampler=NAME`, default `tpe`; NAME is one of "
        + ", ".join(f"`{n}` (Optuna's `{c}`)" for n, c in sweeper_config.SAMPLERS.items())
        + ".",
        "",
        f"Schema: `{sampler.__module__}.{sampler.__name__}`.",
        "",
        *table(keys(sampler), "hydra.sweeper.sampler."),
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = usage.parser("config_reference")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {PAGE}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} is out of date")
    args = parser.parse_args(argv)
    wrong = check_notes(schemas())
    if wrong:
        print("\n".join(wrong), file=sys.stderr)
        return 1
    page = render()
    path = ROOT / PAGE
    if args.write:
        path.write_text(page)
        print(f"wrote {path}")
    elif args.check:
        if not path.is_file() or path.read_text() != page:
            print(f"{PAGE} is out of date: run python -m dse.config_reference --write")
            return 1
        print(f"{PAGE} is up to date")
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    from dse.cli import stopped_cleanly

    sys.exit(stopped_cleanly(main))
