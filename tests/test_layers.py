"""The package graph: every import runs down the layers of ARCHITECTURE, none up, none round.

Each module belongs to the first layer whose prefix it matches. A module may import modules of
its own package (the same prefix) and of lower layers; within a layer, the packages listed
there may not import each other unless ``SIDEWAYS`` allows it. Imports inside functions count
as imports: they do not hide an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dse", "chromosomes", "models_analytical", "hydra_plugins")

#: Bottom to top: (layer name, module prefixes).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "dse.context",  # the run context: the one tie between the jobs and the command
            "dse.errors",
            "dse.files",
            "dse.host",
            "dse.lifetime",
            "dse.paths",
            "dse.record_tables",
            "dse.records",
            "dse.values",
        ),
    ),
    ("networks", ("dse.net",)),
    ("contract", ("dse.platform", "dse.objectives", "dse.mapping", "dse.config")),
    ("encodings and model", ("chromosomes", "models_analytical")),
    ("search and runtime", ("dse.search", "dse.runtime")),
    ("emulated cluster", ("dse.cluster",)),  # it gives the runtime a launcher on its boards
    # a deployment kept running for an application: the runtime's ranks started once, on the
    # platform's launcher (the cluster's where it has one)
    ("serving", ("dse.serve",)),
    ("assembly", ("dse.app",)),
    ("results", ("dse.results",)),
    # deploys sets of mappings, runs their rounds, puts the model beside them, writes their
    # rows: what phase two, fidelity and calibration share
    ("measuring", ("dse.measuring",)),
    # The search workflow (one exploration, its outputs, phase two) is dse/search/'s, but it
    # assembles the model (dse.app), writes the outputs (dse.results) and measures (phase two):
    # it sits here, above the rest of dse.search, which imports nothing of it (a module belongs
    # to its longest matching prefix).
    ("workflows", ("dse.search.workflow", "dse.calibrate", "dse.fidelity")),
    ("entry plumbing", ("dse.cli", "dse.outdirs", "dse.usage")),
    (
        "entry points",
        (
            "dse.__main__",
            "dse.inspect",
            "dse.evaluate",
            "dse.deploy",
            "dse.compare",
            "hydra_plugins",
            "dse",  # the package itself (dse/__init__.py)
        ),
    ),
    # the configuration reference's generator reads the sweeper's config beside dse's
    ("documentation", ("dse.config_reference",)),
]
#: Imports between packages of one layer that the architecture allows (importer, imported).
#: Each is made by some import (a test says so): an allowance nothing uses is taken out.
SIDEWAYS = {
    ("dse.files", "dse.errors"),
    ("dse.records", "dse.errors"),
    ("dse.values", "dse.errors"),
    ("dse.record_tables", "dse.records"),
    ("dse.config", "dse.objectives"),  # a config checks objective names
    ("dse.cli", "dse.usage"),  # --help and --version
}


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the prefix it matched) of a module; the entry point of a package (its
    ``__main__``) belongs to the entry-point layer, with its package as its prefix."""
    if module.endswith(".__main__"):
        return len(LAYERS) - 1, module.removesuffix(".__main__")
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (
                best is None or len(p) > len(best[1])
            ):
                best = (i, p)
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS"
    return best


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports (``from pkg import submodule`` counts as the
    submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            names = [n if n in known else node.module for n in names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names:
            while n not in known and "." in n:
                n = n.rsplit(".", 1)[0]
            if n in known:
                found.add(n)
    return found


def arrows() -> list[tuple[str, str, int, int, tuple[str, str]]]:
    """Every import between packages: (importer, imported, the importer's layer, the imported's
    layer, (the importer's prefix, the imported's)); imports within a package are left out."""
    known = modules()
    out = []
    for mod, path in sorted(known.items()):
        here, prefix = layer_of(mod)
        for dep in sorted(imports(path, known)):
            there, dep_prefix = layer_of(dep)
            if dep_prefix == prefix or dep.startswith(prefix + ".") or mod.startswith(dep + "."):
                continue  # its own package
            out.append((mod, dep, here, there, (prefix, dep_prefix)))
    return out


def test_no_import_runs_up_or_sideways():
    wrong = [
        f"{mod} ({LAYERS[here][0]}) imports {dep} ({LAYERS[there][0]})"
        for mod, dep, here, there, pair in arrows()
        if there > here or (there == here and pair not in SIDEWAYS)
    ]
    assert not wrong, "\n".join(wrong)


def test_every_sideways_allowance_is_used():
    """An allowance no import makes is a door left open: take it out of ``SIDEWAYS``."""
    used = {pair for _, _, here, there, pair in arrows() if here == there}
    stale = sorted(SIDEWAYS - used)
    assert not stale, f"SIDEWAYS allows imports that no module makes: {stale}"


def test_no_test_module_imports_another():
    """What test modules share (networks, platforms, checks) lives in ``tests/helpers/``:
    importing a test module runs its module-level code and ties two test files together."""
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:]):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
                    break
    assert not wrong, "\n".join(wrong)


def _by_name_in_sys_modules(node: ast.AST) -> str | None:
    """The module name in ``sys.modules["NAME"]`` or ``sys.modules.get("NAME")``, if ``node``
    is one of those with a literal name."""
    if isinstance(node, ast.Subscript):
        target, key = node.value, node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        target, key = node.func.value, node.args[0]
    else:
        return None
    is_sys_modules = (
        isinstance(target, ast.Attribute)
        and target.attr == "modules"
        and isinstance(target.value, ast.Name)
        and target.value.id == "sys"
    )
    if is_sys_modules and isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return None


def test_no_module_reaches_another_through_sys_modules():
    """A module that takes another from ``sys.modules`` by name (to read or set its state)
    imports it without an import statement: an arrow the layer test cannot see (the sweeper
    once set ``dse.cli``'s globals so; it now imports :func:`dse.cli.run_context`)."""
    known = modules()
    hidden = []
    for mod, path in sorted(known.items()):
        for node in ast.walk(ast.parse(path.read_text())):
            name = _by_name_in_sys_modules(node)
            if name is not None and name.split(".")[0] in PACKAGES:
                hidden.append(f"{mod}:{node.lineno} takes {name} from sys.modules")
    assert not hidden, "\n".join(hidden)


def test_no_import_cycle_between_modules():
    known = modules()
    graph = {m: imports(p, known) - {m} for m, p in known.items()}
    # a package's __init__ re-exporting its submodules is not a cycle of the design
    for m in graph:
        graph[m] = {d for d in graph[m] if not d.startswith(m + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join([*stack[stack.index(d) :], d]))
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


#: A newcomer reads a module in one sitting and a function on one screen or two (issue 27).
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 150


def test_no_module_over_600_lines_and_no_function_over_150() -> None:
    """Every module of the packages, and every function in them (a numba kernel's stages
    included), within the sizes the house was built to."""
    long_modules, long_functions = [], []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            where = path.relative_to(ROOT)
            if len(text.splitlines()) > MAX_MODULE_LINES:
                long_modules.append(f"{where} ({len(text.splitlines())} lines)")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        long_functions.append(f"{where}:{node.lineno} {node.name} ({lines})")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


#: The runtime's sides (``dse.runtime.<side>``) and the sides each may import: what a
#: deployment directory holds is read by all; compiling a mapping and what runs in a rank know
#: only that; the launching side brings the others together.
SIDES = {
    "deployment": set(),
    "compile": {"deployment"},
    "rank": {"deployment"},
    "launch": {"deployment", "compile", "rank"},
}


def test_the_runtime_sides_import_only_what_they_may() -> None:
    known = modules()
    wrong = []
    for mod, path in sorted(known.items()):
        parts = mod.split(".")
        if parts[:2] != ["dse", "runtime"] or len(parts) < 3 or parts[2] not in SIDES:
            continue
        side = parts[2]
        for dep in sorted(imports(path, known)):
            d = dep.split(".")
            other = d[2] if d[:2] == ["dse", "runtime"] and len(d) > 2 else side
            if other != side and other not in SIDES[side]:
                wrong.append(f"{mod} ({side}) imports {dep}")
    assert not wrong, "\n".join(wrong)
