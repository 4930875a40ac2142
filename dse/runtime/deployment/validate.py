"""The rules a plan must keep before a rank runs it: a plan from disk is never trusted (its
reader, :func:`dse.runtime.deployment.reader.read_plan`, applies them).

:func:`validate` checks a :class:`~dse.runtime.deployment.plan.Plan` whose schema
:meth:`~dse.runtime.deployment.plan.Plan.from_json` has checked:

- **ranks**: numbered 0..K-1 in order, each device once, the entry rank and every output's
  rank among them;
- **sub-models**: each rank's ``segments`` are its ``run`` steps' sub-models, in order, each
  once in the whole plan, each a plain file name (``rank0_seg1.onnx``: no directory part);
- **messages**: every tensor that crosses ranks has one tag, below :data:`OUTPUT_TAG`, unique;
  every send is matched by a receive (or a gather's part) on its peer with the same tag and
  tensor, and every receive by a send; sends go to another rank; the plan does not deadlock
  (receives block in program order, sends do not);
- **gathers**: the axis is one of the tensor's, the parts' ranges cover ``[0, size)`` of it in
  order without overlap, one local part at most (the rank's own, untagged), the others tagged
  from other ranks;
- **tensors**: each step reads only tensors its rank holds at that point (the entry rank starts
  with the graph inputs; a run, receive or gather makes them, ``free`` drops them), with the
  shape and type the plan gives them: a send's tensor is the wire tensor, a gather's parts
  are the views of the whole they fill; with the sub-models' own ONNX inputs and outputs
  (``io``), a run's inputs are exactly its sub-model's, with their shapes and types, and its
  outputs are among the sub-model's; every graph output is held at its rank at the end;
- **sizes**: a rank's buffers (the tensors it receives or gathers, the graph inputs on the
  entry rank) are each, and together, at most its device's memory (``memory_mb``, which the platform
  gives, in MB of 10^6 bytes), and at most ``host_memory`` where the caller knows the memory of the
  machine the rank runs on (a rank does: :func:`dse.runtime.deployment.reader.host_memory_bytes`; a
  plan that lifts ``memory_mb`` cannot lift that); any other tensor at most the largest device's.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper

from dse.errors import DseError
from dse.runtime.deployment.plan import (
    PLAN,
    Gather,
    Plan,
    RankPlan,
    Recv,
    Run,
    Send,
    TensorSpec,
)

#: Graph outputs go to rank 0 with tags from here on (:func:`dse.runtime.rank.worker`); the plan's
#: own tags stay below.
OUTPUT_TAG = 1_000_000
#: A sub-model's or data file's name: a plain file name of the deployment directory.
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")
#: A sub-model's ONNX inputs and outputs: name -> spec (a dimension None where symbolic; the
#: spec None where ONNX gives no shape or a type a plan has not).
Specs = dict[str, TensorSpec | None]
SegmentIO = dict[str, tuple[Specs, Specs]]


class _Rules:
    def __init__(self, plan: Plan, where: str) -> None:
        self.plan, self.where = plan, where

    def fail(self, at: str, problem: str) -> DseError:
        return DseError(f"{self.where}: {at}: {problem} (deploy the mapping again)")


def validate(
    plan: Plan,
    io: SegmentIO | None = None,
    host_memory: int | None = None,
    where: str = PLAN,
) -> None:
    """Check ``plan`` against the rules of the module docstring; one line naming the first
    rule broken. ``io``: every sub-model's ONNX inputs and outputs, where known."""
    rules = _Rules(plan, where)
    _ranks(rules)
    _segments(rules)
    _messages(rules)
    _sizes(rules, host_memory)
    for r in plan.ranks:
        _flow(rules, r, io)
    _no_deadlock(rules)


def check_io(plan: Plan, io: SegmentIO, ranks: list[int], where: str = PLAN) -> None:
    """The steps of ``ranks`` against their sub-models' ONNX inputs and outputs (``io``), on a
    plan :func:`validate` has passed."""
    rules = _Rules(plan, where)
    for r in ranks:
        _flow(rules, plan.ranks[r], io)


def _ranks(rules: _Rules) -> None:
    plan = rules.plan
    if not plan.ranks:
        raise rules.fail("ranks", "no rank")
    devices: set[str] = set()
    indices: set[int] = set()
    for i, r in enumerate(plan.ranks):
        if r.rank != i:
            raise rules.fail(f"ranks[{i}].rank", f"is {r.rank}: ranks are numbered 0..K-1 in order")
        if r.device in devices or r.device_index in indices:
            raise rules.fail(f"ranks[{i}].device", f"device {r.device} has another rank already")
        devices.add(r.device)
        indices.add(r.device_index)
    k = len(plan.ranks)
    if plan.entry_rank >= k:
        raise rules.fail("entry_rank", f"{plan.entry_rank} is not a rank (0..{k - 1})")
    for i, o in enumerate(plan.outputs):
        if o.rank is None or o.rank >= k:
            raise rules.fail(f"outputs[{i}].rank", f"{o.rank} is not a rank (0..{k - 1})")
    for what, ports in (("inputs", plan.inputs), ("outputs", plan.outputs)):
        twice = [n for n, c in Counter(p.name for p in ports).items() if c > 1]
        if twice:
            raise rules.fail(what, f"tensor '{twice[0]}' is named twice")


def _segments(rules: _Rules) -> None:
    seen: set[str] = set()
    for r in rules.plan.ranks:
        runs = [s.segment for s in r.steps if isinstance(s, Run)]
        if runs != r.segments:
            raise rules.fail(
                f"ranks[{r.rank}].segments", "are not the sub-models its run steps run, in order"
            )
        for name in runs:
            if not FILE_NAME.fullmatch(name) or not name.endswith(".onnx"):
                raise rules.fail(
                    f"ranks[{r.rank}].segments", f"'{name}' is not a plain .onnx file name"
                )
            if name in seen:
                raise rules.fail(f"ranks[{r.rank}].segments", f"'{name}' is run twice")
            seen.add(name)


def _messages(rules: _Rules) -> None:
    plan = rules.plan
    tags = Counter(w.tag for w in plan.tensors.values())
    for name, w in plan.tensors.items():
        if w.tag >= OUTPUT_TAG:
            raise rules.fail(f"tensors.{name}.tag", f"{w.tag} is not below {OUTPUT_TAG}")
        if tags[w.tag] > 1:
            raise rules.fail(f"tensors.{name}.tag", f"tag {w.tag} is another tensor's too")
    k = len(plan.ranks)
    sent: Counter[tuple[int, int, int, str]] = Counter()
    received: Counter[tuple[int, int, int, str]] = Counter()
    for r in plan.ranks:
        for i, s in enumerate(r.steps):
            at = f"ranks[{r.rank}].steps[{i}]"
            if isinstance(s, Send | Recv):
                peer = s.to if isinstance(s, Send) else s.source
                _tagged(rules, at, s.tensor, s.tag)
                if peer >= k or peer == r.rank:
                    raise rules.fail(at, f"peer {peer} is not another rank (0..{k - 1})")
                key = (r.rank, peer, s.tag, s.tensor) if isinstance(s, Send) else None
                if key is not None:
                    sent[key] += 1
                else:
                    received[(peer, r.rank, s.tag, s.tensor)] += 1
            elif isinstance(s, Gather):
                for j, p in enumerate(s.parts):
                    if p.tag is None:
                        continue
                    _tagged(rules, f"{at}.parts[{j}]", p.tensor, p.tag)
                    if p.source >= k or p.source == r.rank:
                        raise rules.fail(f"{at}.parts[{j}].from", "is not another rank")
                    received[(p.source, r.rank, p.tag, p.tensor)] += 1
    for key in sent.keys() | received.keys():
        if sent[key] != received[key]:
            src, dst, tag, tensor = key
            what = "sends" if sent[key] > received[key] else "is to receive"
            raise rules.fail(
                f"ranks[{src if what == 'sends' else dst}]",
                f"{what} '{tensor}' (tag {tag}) {'to' if what == 'sends' else 'from'} rank "
                f"{dst if what == 'sends' else src} {max(sent[key], received[key])} time(s), "
                f"matched {min(sent[key], received[key])} time(s)",
            )


def _tagged(rules: _Rules, at: str, tensor: str, tag: int) -> None:
    wire = rules.plan.tensors.get(tensor)
    if wire is None:
        raise rules.fail(at, f"tensor '{tensor}' crosses ranks but is not in 'tensors'")
    if wire.tag != tag:
        raise rules.fail(at, f"tag {tag} is not tensor '{tensor}''s ({wire.tag})")


def _buffers(plan: Plan, r: RankPlan) -> dict[str, TensorSpec]:
    """What rank ``r`` allocates once: a buffer per tensor it receives or gathers, and the
    graph inputs on the entry rank (:class:`dse.runtime.rank.worker.Rank`)."""
    out = {p.name: p.spec for p in plan.inputs} if r.rank == plan.entry_rank else {}
    for s in r.steps:
        if isinstance(s, Recv) and s.tensor in plan.tensors:
            out[s.tensor] = plan.tensors[s.tensor].spec
        elif isinstance(s, Gather):
            out[s.tensor] = s.spec
    return out


def _sizes(rules: _Rules, host_memory: int | None) -> None:
    plan = rules.plan
    limits = []
    for r in plan.ranks:
        limit = int(r.memory_mb * 1e6)
        if host_memory is not None:
            limit = min(limit, host_memory)
        limits.append(limit)
        total = 0
        for name, spec in _buffers(plan, r).items():
            total += spec.nbytes
            if spec.nbytes > limit:
                raise rules.fail(
                    f"ranks[{r.rank}]",
                    f"tensor '{name}' {list(spec.shape)} takes {_size(spec.nbytes)}, more than "
                    f"the {_size(limit)} of memory of its device",
                )
        if total > limit:
            raise rules.fail(
                f"ranks[{r.rank}]",
                f"its buffers take {_size(total)}, more than the {_size(limit)} of memory of "
                "its device",
            )
    largest = max(limits)
    specs = [(f"tensors.{k}", w.spec) for k, w in plan.tensors.items()]
    specs += [(f"outputs.{p.name}", p.spec) for p in plan.outputs]
    for at, spec in specs:
        if spec.nbytes > largest:
            raise rules.fail(at, f"takes {_size(spec.nbytes)}, more than any device has")


def _size(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 10**6 else f"{n:,} bytes"


def _flow(rules: _Rules, r: RankPlan, io: SegmentIO | None) -> None:
    """Each step reads tensors its rank holds, of the plan's shapes and types."""
    plan = rules.plan
    held: dict[str, TensorSpec | None] = (
        {p.name: p.spec for p in plan.inputs} if r.rank == plan.entry_rank else {}
    )

    def need(at: str, name: str, spec: TensorSpec | None, reader: str = "the step") -> None:
        if name not in held:
            raise rules.fail(at, f"reads tensor '{name}', which rank {r.rank} does not hold there")
        if spec is not None and not _same(held[name], spec):
            raise rules.fail(
                at, f"tensor '{name}' is {_show(held[name])}, but {reader} takes {_show(spec)}"
            )

    for i, s in enumerate(r.steps):
        at = f"ranks[{r.rank}].steps[{i}]"
        if isinstance(s, Run):
            ins, outs = io[s.segment] if io is not None else ({}, {})
            if io is not None and sorted(s.inputs) != sorted(ins):
                raise rules.fail(
                    at, f"feeds {sorted(s.inputs)[:4]}, but {s.segment} takes {sorted(ins)[:4]}"
                )
            for t in s.inputs:
                need(at, t, ins.get(t), s.segment)
            for t in s.outputs:
                if io is not None and t not in outs:
                    raise rules.fail(at, f"{s.segment} has no output '{t}'")
                held[t] = outs.get(t)
        elif isinstance(s, Send):
            need(at, s.tensor, plan.tensors[s.tensor].spec, "the wire (tensors)")
        elif isinstance(s, Recv):
            held[s.tensor] = plan.tensors[s.tensor].spec
        else:
            _gather(rules, at, r, s, need)
            held[s.tensor] = s.spec
        for t in s.free:
            if held.pop(t, "gone") == "gone":
                raise rules.fail(f"{at}.free", f"tensor '{t}' is not held there")
    for o in plan.outputs:
        if o.rank == r.rank:
            need(f"outputs.{o.name}", o.name, o.spec, "the graph output")


def _gather(rules: _Rules, at: str, r: RankPlan, s: Gather, need) -> None:  # noqa: ANN001
    if s.axis >= len(s.shape):
        raise rules.fail(f"{at}.axis", f"{s.axis} is not an axis of {list(s.shape)}")
    end = 0
    local = 0
    for j, p in enumerate(sorted(s.parts, key=lambda p: p.range)):
        lo, hi = p.range
        if lo != end or hi <= lo:
            raise rules.fail(
                f"{at}.parts", f"ranges do not cover [0, {s.shape[s.axis]}) in order without gaps"
            )
        end = hi
        view = list(s.shape)
        view[s.axis] = hi - lo
        spec = TensorSpec(tuple(view), s.dtype)
        if p.tag is None:
            local += 1
            if p.source != r.rank:
                raise rules.fail(f"{at}.parts[{j}]", "an untagged part must be the rank's own")
            need(at, p.tensor, spec, "its range of the whole")
        elif not _same(rules.plan.tensors[p.tensor].spec, spec):
            raise rules.fail(f"{at}.parts[{j}]", f"'{p.tensor}' does not fill {_show(spec)}")
    if end != s.shape[s.axis] or local > 1:
        raise rules.fail(f"{at}.parts", f"do not cover [0, {s.shape[s.axis]}) once")


def _no_deadlock(rules: _Rules) -> None:
    """Run the plan's messages alone: sends never block, a receive or gather waits for its
    messages; every rank must reach its end."""
    ranks = rules.plan.ranks
    pc = [0] * len(ranks)
    posted: Counter[tuple[int, int, int]] = Counter()
    moved = True
    while moved:
        moved = False
        for r in ranks:
            while pc[r.rank] < len(r.steps):
                s = r.steps[pc[r.rank]]
                wants = []
                if isinstance(s, Recv):
                    wants = [(s.source, r.rank, s.tag)]
                elif isinstance(s, Gather):
                    wants = [(p.source, r.rank, p.tag) for p in s.parts if p.tag is not None]
                if any(posted[w] < 1 for w in wants):
                    break
                for w in wants:
                    posted[w] -= 1
                if isinstance(s, Send):
                    posted[(r.rank, s.to, s.tag)] += 1
                pc[r.rank] += 1
                moved = True
    stuck = [r.rank for r in ranks if pc[r.rank] < len(r.steps)]
    if stuck:
        first = stuck[0]
        raise rules.fail(
            f"ranks[{first}].steps[{pc[first]}]",
            "waits for a message no rank sends before it: a deadlock",
        )


def _same(a: TensorSpec | None, b: TensorSpec | None) -> bool:
    """Equal shapes and types; a dimension None (symbolic in ONNX) or an unknown spec agrees."""
    if a is None or b is None:
        return True
    if a.dtype != b.dtype or len(a.shape) != len(b.shape):
        return False
    return all(x is None or y is None or x == y for x, y in zip(a.shape, b.shape, strict=True))


def _show(spec: TensorSpec | None) -> str:
    return "unknown" if spec is None else f"{spec.dtype}{list(spec.shape)}"


def value_spec(v: onnx.ValueInfoProto) -> TensorSpec | None:
    t = v.type.tensor_type
    if not t.HasField("shape") or t.elem_type == TensorProto.UNDEFINED:
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return TensorSpec(dims, dtype)  # type: ignore[arg-type]


def model_io(model: onnx.ModelProto) -> tuple[Specs, Specs]:
    g = model.graph
    inits = {t.name for t in g.initializer}
    ins = {v.name: value_spec(v) for v in g.input if v.name not in inits}
    return ins, {v.name: value_spec(v) for v in g.output}
