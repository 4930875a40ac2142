"""The kernel's numba pipeline: numba's own, made cheaper to compile where inlining is.

None of these changes alters the code numba generates, only what compiling it costs (figures:
a cold cache, VGG-16 unless said, CPU seconds on the 2-core machine):

* :class:`InlineStages` inlines stages (:func:`~models_analytical.schedule.compiled.stage`) as
  numba does, without copying them: for each call site numba builds the callee's IR afresh
  (its front end, run again), then copies it block by block twice, once to work on and once
  to hand back unchanged to the pass, which drops it. Each copy was deep, statement by
  statement, and (as numba copies a block) of the whole variable scope once per block, which
  is quadratic in the stage's size (5.9 s). The IR built for one call site is held by nothing
  else, so its blocks are inlined as they are: the pass took 3.5-4.5 s on VGG-16's kernel
  with the blocks' statements copied (their scope shared), 2.2-2.5 s without; the batch with
  row splits compiled in 63 s instead of 73 s (CPU time).
* :class:`ForwardCopies`: inlining binds each parameter of a stage to the caller's variable
  by a copy (``st.5 = st``), so the kernel's inputs and state, namedtuples of some 80 arrays,
  had one copy per inlined stage, 44 in ``simulate_one``. numba gives each a stack slot and
  LLVM splits every slot back into its ~330 scalars (SROA): 19 s of LLVM's function passes on
  ``simulate_one``, 5 s once the copies are forwarded. After numba's SSA pass every variable
  is assigned once, so a variable copied from another is that other: each use is renamed.
* :class:`SSAByMentions`: numba's SSA reconstruction, which rewrites every block of the
  function twice for each variable assigned more than once (251 in the kernel for batches
  with row splits, 6.8 million statement visits), rewrites only the blocks that mention the
  variable: that kernel's SSA pass took 16.6 s of its 66 s, 5.4 s now. A block that does
  not mention it is left as it is by numba's rewrite too, and changes nothing it keeps (the
  reaching definitions, the phi nodes to insert), so the result is the same IR; the phi
  nodes that go into such a block go into a copy of it, as numba's go into a new block.

This uses numba's compiler-pass API (``numba.core.compiler_machinery``, documented for custom
pipelines, not a stable public API). While their passes run (under numba's compiler lock),
:class:`InlineStages` replaces the ``copy`` module that ``numba.core.inline_closurecall``
sees, and :class:`SSAByMentions` the function ``numba.core.ssa._run_ssa`` (and calls that
module's other functions); where numba no longer has those names, each does as numba does.
``tests/model`` compiles the kernel through this pipeline.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numba.core.inline_closurecall as inline_closurecall
from numba.core import errors as _errors
from numba.core import ir, types
from numba.core import ssa as _ssa
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.ir_utils import build_definitions, mk_unique_var, replace_var_names
from numba.core.typed_passes import NopythonTypeInference
from numba.core.untyped_passes import InlineInlinables, ReconstructSSA

#: The functions of numba's SSA module SSAByMentions calls or replaces (internal names).
_SSA_NAMES = (
    "_run_ssa",
    "compute_cfg_from_blocks",
    "_iterated_domfronts",
    "_find_defs_violators",
    "_CacheListVars",
    "_fresh_vars",
    "_make_states",
    "_compute_phi_locations",
    "_run_block_rewrite",
    "_FixSSAVars",
)
#: Whether numba still has them all (else SSAByMentions does as numba does).
_SSA_KNOWN = all(hasattr(_ssa, name) for name in _SSA_NAMES)


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
    if getattr(inline_closurecall, "copy", None) is not copy:
        yield  # numba changed: copy as it does
        return
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
        if not _SSA_KNOWN:
            return super().run_pass(state)
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
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        ours = {InlineInlinables: InlineStages, ReconstructSSA: SSAByMentions}
        pm.passes = [(ours.get(p, p), d) for p, d in pm.passes]
        if self.state.flags.enable_ssa:
            pm.add_pass_after(ForwardCopies, SSAByMentions)
            pm.add_pass_after(HoistFieldReads, NopythonTypeInference)
        pm.finalize()
        return [pm]
