"""The kernel's numba pipeline: numba's own, made cheaper to compile where inlining is.

None of these changes alters the code numba generates, only what compiling it costs (the
figures: ``docs/results/performance.md``, "The first run"):

* :class:`InlineStages` inlines stages (:func:`~models_analytical.schedule.compiled.stage`) as
  numba does, without copying them: for each call site numba builds the callee's IR afresh
  (its front end, run again), then copies it block by block twice, once to work on and once
  to hand back unchanged to the pass, which drops it. Each copy is deep, statement by
  statement, and (as numba copies a block) of the whole variable scope once per block, which
  is quadratic in the stage's size. The IR built for one call site is held by nothing else,
  so its blocks are inlined as they are.
* :class:`ForwardCopies`: inlining binds each parameter of a stage to the caller's variable
  by a copy (``st.5 = st``), so the kernel's inputs and state, namedtuples of some 80 arrays,
  get one copy per inlined stage. numba gives each a stack slot and LLVM splits every slot
  back into its scalars (SROA), copy after copy. After numba's SSA pass every variable is
  assigned once, so a variable copied from another is that other: each use is renamed.
* :class:`SSAByMentions`: numba's SSA reconstruction rewrites every block of the function
  twice for each variable assigned more than once (hundreds in the kernel for batches with
  row splits); this one rewrites only the blocks that mention the variable. A block that
  does not mention it is left as it is by numba's rewrite too, and changes nothing it keeps
  (the reaching definitions, the phi nodes to insert), so the result is the same IR; the phi
  nodes that go into such a block go into a copy of it, as numba's go into a new block.

This uses numba's compiler-pass API (``numba.core.compiler_machinery``, documented for custom
pipelines, not a stable public API) and replaces two of numba's internals while their passes
run (under numba's compiler lock): :class:`InlineStages` the ``copy`` module that
``numba.core.inline_closurecall`` sees, :class:`SSAByMentions` the function
``numba.core.ssa._run_ssa`` (and it calls that module's other functions). Both are right for
numba's code as it is in the releases :data:`NUMBA_PIN` allows (``pyproject.toml`` pins numba
to them): :func:`check_numba` compares the source of every numba function they replace or
rely on with those releases', and the first compilation through this pipeline fails in one
line where one differs. ``tests/model/test_pipeline.py`` checks the passes on small functions,
``tests/model/test_stock_pipeline.py`` the kernel's figures on the zoo against the kernel
compiled by numba's stock pipeline, bit for bit.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import inspect
import re
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import Any

import numba
import numba.core.inline_closurecall as inline_closurecall
from numba.core import errors as _errors
from numba.core import ir, types
from numba.core import ssa as _ssa
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.ir_utils import build_definitions, mk_unique_var, replace_var_names
from numba.core.typed_passes import NopythonTypeInference
from numba.core.untyped_passes import InlineInlinables, ReconstructSSA

from dse.errors import DseError

#: The numba releases whose internals the pipeline's replacements were checked against, as
#: ``pyproject.toml`` requires them (the tests check the two agree).
NUMBA_PIN = ">=0.61,<0.69"

#: The numba functions and classes the replacements replace or rely on, by the digest of their
#: source (:func:`source_digest`), as in every release :data:`NUMBA_PIN` allows
#: (0.61.0 to 0.68.1: unchanged across them). ``SSAByMentions`` is ``_run_ssa`` and
#: ``_fix_ssa_vars`` run on fewer blocks, through the helpers they call, in place of the
#: ``_run_ssa`` that ``reconstruct_ssa`` (``ReconstructSSA``'s) calls; ``InlineStages`` relies
#: on the inliner's only copies being the callee's blocks, deep-copied in ``inline_ir``, of an
#: IR that ``inline_function`` builds afresh for one call site (``InlineInlinables``).
NUMBA_SOURCES: dict[str, str] = {
    "numba.core.ssa:reconstruct_ssa": "36c9845d547fc8f7",
    "numba.core.ssa:_run_ssa": "c497422bcf049990",
    "numba.core.ssa:_fix_ssa_vars": "3f183045a5355bf4",
    "numba.core.ssa:_run_block_rewrite": "d17efdbed57062bf",
    "numba.core.ssa:_fresh_vars": "4a4d13bc0ec57cfb",
    "numba.core.ssa:_make_states": "4b44d7827493e4b7",
    "numba.core.ssa:_compute_phi_locations": "9d418ed0e65a2a6a",
    "numba.core.ssa:_iterated_domfronts": "5457ae972a154114",
    "numba.core.ssa:_find_defs_violators": "013daf6becaf6429",
    "numba.core.ssa:_CacheListVars": "767b434b66f6542a",
    "numba.core.ssa:_FixSSAVars": "8ac0ed2311ebb1ad",
    "numba.core.inline_closurecall:InlineWorker.inline_ir": "a16b53c6f9e858e6",
    "numba.core.inline_closurecall:InlineWorker.inline_function": "9202af50f97956b6",
    "numba.core.untyped_passes:InlineInlinables": "4e0e625dfe8fd58d",
    "numba.core.untyped_passes:ReconstructSSA": "db185e2b0df44702",
}

#: A call of a function of the ``copy`` module in source text.
_COPY_CALL = re.compile(r"\bcopy\.\w+\(")


def source_digest(obj: Any) -> str:
    """The first 16 hex digits of the SHA-256 of the source of function ``obj`` (dedented),
    or of a class's functions one after another."""
    funcs = (
        [f for f in vars(obj).values() if inspect.isfunction(f)] if isinstance(obj, type) else [obj]
    )
    text = "".join(textwrap.dedent(inspect.getsource(f)) for f in funcs)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def numba_mismatch() -> str | None:
    """What of numba's internals differs from what the replacements were written against
    (:data:`NUMBA_SOURCES`), in a few words; None where nothing does."""
    for name, digest in NUMBA_SOURCES.items():
        module, qualname = name.split(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        shown = f"{module}.{qualname}"
        if obj is None:
            return f"{shown} is missing"
        try:
            if source_digest(obj) != digest:
                return f"{shown} has changed"
        except (OSError, TypeError):
            return f"{shown} has no source to check"
    if getattr(inline_closurecall, "copy", None) is not copy:
        return "numba.core.inline_closurecall no longer imports the copy module"
    module = inspect.getsource(inline_closurecall)
    inline_ir = inspect.getsource(inline_closurecall.InlineWorker.inline_ir)
    if len(_COPY_CALL.findall(module)) != len(_COPY_CALL.findall(inline_ir)):
        return "numba.core.inline_closurecall copies outside InlineWorker.inline_ir"
    return None


@cache
def check_numba() -> None:
    """Fail in one line (:class:`~dse.errors.DseError`) where numba's internals that the
    pipeline replaces are not those it was written against (:func:`numba_mismatch`); once per
    process where they are."""
    what = numba_mismatch()
    if what is not None:
        raise DseError(
            f"numba {numba.__version__} does not fit the model kernel's compiler pipeline "
            f"({what} since the releases it was checked against): install one of those, "
            f"pip install 'numba{NUMBA_PIN}'"
        )


class _BlocksUncopied(ModuleType):
    """The ``copy`` module, but a block's deep copy is the block itself."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x: Any, memo: dict | None = None) -> Any:
        if isinstance(x, ir.Block) and memo is None:
            return x
        return copy.deepcopy(x, memo)


@contextmanager
def _blocks_uncopied() -> Iterator[None]:
    """While inside, numba's inliner inlines a callee's blocks without copying them (see the
    module; its only deep copy is of the callee's blocks, in ``InlineWorker.inline_ir``)."""
    inline_closurecall.copy = _BlocksUncopied("copy")
    try:
        yield
    finally:
        inline_closurecall.copy = copy


@register_pass(mutates_CFG=True, analysis_only=False)
class InlineStages(InlineInlinables):
    """numba's ``InlineInlinables``, its callees' blocks inlined without copies."""

    _name = "dse_inline_stages"

    def run_pass(self, state: Any) -> bool:
        with _blocks_uncopied():
            return super().run_pass(state)


def forward_copies(func_ir: ir.FunctionIR) -> int:
    """Replace every variable assigned once from another variable assigned once by that
    other, and drop the copies; returns how many went."""
    defined: Counter[str] = Counter()
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if isinstance(stmt, ir.Assign):
                defined[stmt.target.name] += 1
    rename = {}
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if (
                isinstance(stmt, ir.Assign)
                and isinstance(stmt.value, ir.Var)
                and defined[stmt.target.name] == 1
                and defined[stmt.value.name] == 1
                and stmt.target.name not in func_ir.arg_names
            ):
                rename[stmt.target.name] = stmt.value.name
    if not rename:
        return 0
    replace_var_names(func_ir.blocks, rename)  # follows chains: a = b, b = c gives c
    for block in func_ir.blocks.values():
        block.body = [
            s
            for s in block.body
            if not (
                isinstance(s, ir.Assign)
                and isinstance(s.value, ir.Var)
                and s.target.name == s.value.name
            )
        ]
    func_ir._definitions = build_definitions(func_ir.blocks)
    return len(rename)


@register_pass(mutates_CFG=False, analysis_only=False)
class ForwardCopies(FunctionPass):
    """:func:`forward_copies` as a numba compiler pass."""

    _name = "dse_forward_copies"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        n = forward_copies(state.func_ir)
        state.metadata.setdefault("dse_pipeline", {})["copies_forwarded"] = n
        return n > 0


def hoist_field_reads(func_ir: ir.FunctionIR, typemap: dict) -> int:
    """Read each field of a namedtuple variable once, right after the variable is defined,
    and rename every other read of it to that one; returns how many reads went. For SSA IR
    (every variable assigned once), typed: a namedtuple's fields never change."""
    where: dict[str, list] = {}
    for label, block in func_ir.blocks.items():
        for i, stmt in enumerate(block.body):
            if isinstance(stmt, ir.Assign):
                where.setdefault(stmt.target.name, []).append((label, i, stmt))
    hoisted: dict[tuple[str, str], str] = {}
    rename: dict[str, str] = {}
    inserts: dict[tuple[int, int], list] = {}
    for block in func_ir.blocks.values():
        for stmt in block.body:
            if not (
                isinstance(stmt, ir.Assign)
                and isinstance(stmt.value, ir.Expr)
                and stmt.value.op == "getattr"
            ):
                continue
            var = stmt.value.value
            defs = where.get(var.name, [])
            if (
                not isinstance(typemap.get(var.name), types.BaseNamedTuple)
                or len(defs) != 1
                or len(where[stmt.target.name]) != 1
                or (isinstance(defs[0][2].value, ir.Expr) and defs[0][2].value.op == "phi")
            ):
                continue
            key = (var.name, stmt.value.attr)
            if key not in hoisted:
                label, i, _ = defs[0]
                new = ir.Var(var.scope, mk_unique_var(f"{var.name}.{stmt.value.attr}"), stmt.loc)
                typemap[new.name] = typemap[stmt.target.name]
                read = ir.Expr.getattr(var, stmt.value.attr, stmt.loc)
                inserts.setdefault((label, i), []).append(ir.Assign(read, new, stmt.loc))
                hoisted[key] = new.name
            rename[stmt.target.name] = hoisted[key]
    if not rename:
        return 0
    for (label, i), stmts in sorted(inserts.items(), key=lambda kv: -kv[0][1]):
        body = func_ir.blocks[label].body
        body[i + 1 : i + 1] = stmts
    gone = set(rename)
    for block in func_ir.blocks.values():
        block.body = [
            s for s in block.body if not (isinstance(s, ir.Assign) and s.target.name in gone)
        ]
    replace_var_names(func_ir.blocks, rename)
    func_ir._definitions = build_definitions(func_ir.blocks)
    return len(rename)


@register_pass(mutates_CFG=False, analysis_only=False)
class HoistFieldReads(FunctionPass):
    """:func:`hoist_field_reads` as a numba compiler pass (after type inference)."""

    _name = "dse_hoist_field_reads"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        n = hoist_field_reads(state.func_ir, state.typemap)
        state.metadata.setdefault("dse_pipeline", {})["field_reads_hoisted"] = n
        return n > 0


def ssa_by_mentions(blocks: dict) -> dict:
    """numba's ``ssa._run_ssa`` (minimal SSA, Choi et al.), each variable's two rewrites run
    on the blocks that mention it only (see the module); the same blocks numba returns."""
    if not blocks:
        return {}
    cfg = _ssa.compute_cfg_from_blocks(blocks)
    df_plus = _ssa._iterated_domfronts(cfg)
    violators = _ssa._find_defs_violators(blocks, cfg)
    cache_list_vars = _ssa._CacheListVars()
    where: dict[str, list] = {name: [] for name in violators}
    for label, block in blocks.items():
        names = {v.name for stmt in block.body for v in stmt.list_vars()}
        for name in names.intersection(where):
            where[name].append(label)
    blocks = dict(blocks)
    for name in violators:
        labels = where[name]
        if not labels:
            continue
        fresh, defmap = _ssa._fresh_vars({label: blocks[label] for label in labels}, name)
        blocks.update(fresh)
        states = _ssa._make_states(blocks)
        states["varname"] = name
        states["defmap"] = defmap
        phimap: defaultdict[int, list[ir.Assign]] = defaultdict(list)  # label -> its phis
        states["phimap"] = phimap
        states["cfg"] = cfg
        states["phi_locations"] = _ssa._compute_phi_locations(df_plus, defmap)
        fixed = _ssa._run_block_rewrite(
            {label: blocks[label] for label in labels},
            states,
            _ssa._FixSSAVars(cache_list_vars),
        )
        blocks.update(fixed)
        for label, phis in phimap.items():
            block = blocks[label] if label in fixed else blocks[label].copy()
            block.body = phis + block.body
            blocks[label] = block
    if _ssa.compute_cfg_from_blocks(blocks) != cfg:
        raise _errors.CompilerError("CFG mutated in SSA pass")
    return blocks


@register_pass(mutates_CFG=False, analysis_only=False)
class SSAByMentions(ReconstructSSA):
    """numba's ``ReconstructSSA`` with :func:`ssa_by_mentions` for ``ssa._run_ssa``."""

    _name = "dse_ssa_by_mentions"

    def run_pass(self, state: Any) -> bool:
        numbas = _ssa._run_ssa
        _ssa._run_ssa = ssa_by_mentions
        try:
            return super().run_pass(state)
        finally:
            _ssa._run_ssa = numbas


class KernelCompiler(CompilerBase):
    """numba's nopython pipeline with :class:`InlineStages` for its inlining pass and
    :class:`SSAByMentions` for its SSA pass, :class:`ForwardCopies` after that and
    :class:`HoistFieldReads` after type inference."""

    def define_pipelines(self) -> list:
        check_numba()
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        ours = {InlineInlinables: InlineStages, ReconstructSSA: SSAByMentions}
        pm.passes = [(ours.get(p, p), d) for p, d in pm.passes]
        if self.state.flags.enable_ssa:
            pm.add_pass_after(ForwardCopies, SSAByMentions)
            pm.add_pass_after(HoistFieldReads, NopythonTypeInference)
        pm.finalize()
        return [pm]
