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
    ("assembly", ("dse.app",)),
    ("results", ("dse.results",)),
    ("workflows", ("dse.calibrate", "dse.fidelity")),
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
SIDEWAYS = {
    ("dse.files", "dse.errors"),
    ("dse.values", "dse.errors"),
    ("dse.records", "dse.errors"),
    ("dse.record_tables", "dse.records"),
    ("dse.config", "dse.objectives"),  # a config checks objective names
    ("dse.mapping", "dse.platform"),
    ("models_analytical", "chromosomes"),
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


def test_no_import_runs_up_or_sideways():
    known = modules()
    wrong = []
    for mod, path in sorted(known.items()):
        here, prefix = layer_of(mod)
        for dep in sorted(imports(path, known)):
            there, dep_prefix = layer_of(dep)
            if dep_prefix == prefix or dep.startswith(prefix + ".") or mod.startswith(dep + "."):
                continue  # its own package
            if there > here or (there == here and (prefix, dep_prefix) not in SIDEWAYS):
                wrong.append(f"{mod} ({LAYERS[here][0]}) imports {dep} ({LAYERS[there][0]})")
    assert not wrong, "\n".join(wrong)


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
