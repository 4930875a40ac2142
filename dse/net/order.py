"""Peak activation memory of an execution order, and a memory-aware order (seed 002).

Allocate-then-free: running a layer first allocates its outputs, then frees every tensor whose
readers have all run (graph inputs are live from the start). The peak depends on the order of
independent branches; :func:`memory_aware_order` searches topological orders with Serenity's
dynamic programme: one best partial schedule (lowest peak, then lowest live bytes) per set of
scheduled layers, bounded by a beam. Its work grows with the number of parallel branches, so it
also has a budget of expansions: once spent, the best partial schedule is finished depth first
(one branch at a time, linear time), and the lower-peak of that and a depth-first order of the
whole graph is returned. Small graphs never reach the budget and keep the optimal order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dse.net.graph import LayerGraph

#: Work the programme may do, in layers copied while extending partial schedules by one ready
#: layer each. The zoo nets need at most 6.5 million (GoogLeNet); 1000 parallel branches would
#: need billions.
EXPANSIONS = 15_000_000


@dataclass(frozen=True)
class _Liveness:
    preds: list[frozenset[int]]
    succs: list[frozenset[int]]
    out: list[int]  # bytes each layer allocates
    keep: frozenset[int]  # layers whose outputs are graph outputs (never freed)
    inputs: list[tuple[int, frozenset[int]]]  # graph-input bytes and their readers
    reads: list[list[int]]  # per layer: indices into ``inputs`` of the graph inputs it reads

    @classmethod
    def of(cls, graph: LayerGraph) -> _Liveness:
        n = len(graph)
        preds: list[set[int]] = [set() for _ in range(n)]
        succs: list[set[int]] = [set() for _ in range(n)]
        readers: dict[str, set[int]] = {t.name: set() for t in graph.inputs}
        for s, d, name in zip(
            graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_tensor, strict=True
        ):
            if s >= 0:
                preds[d].add(s)
                succs[s].add(d)
            else:
                readers.setdefault(name, set()).add(d)
        keep = frozenset(graph.producer[t.name] for t in graph.outputs if t.name in graph.producer)
        inputs = [(t.nbytes, frozenset(readers[t.name])) for t in graph.inputs]
        reads: list[list[int]] = [[] for _ in range(n)]
        for i, (_, rs) in enumerate(inputs):
            for v in rs:
                reads[v].append(i)
        return cls(
            [frozenset(p) for p in preds],
            [frozenset(s) for s in succs],
            graph.output_bytes.tolist(),
            keep,
            inputs,
            reads,
        )

    def freed(self, v: int, done: frozenset[int] | set[int]) -> int:
        """Bytes freed once ``v`` has run, ``done`` including ``v``."""
        nbytes = sum(
            self.out[u] for u in self.preds[v] if u not in self.keep and self.succs[u] <= done
        )
        return nbytes + sum(self.inputs[i][0] for i in self.reads[v] if self.inputs[i][1] <= done)


def peak_memory(graph: LayerGraph, order: Iterable[int]) -> int:
    """Peak bytes of live activations when running ``order`` on one device (linear time)."""
    lv = _Liveness.of(graph)
    return _peak(lv, order)


def _peak(lv: _Liveness, order: Iterable[int]) -> int:
    # readers still to run, per layer output and per graph input
    waiting = [len(s) for s in lv.succs]
    input_waiting = [len(rs) for _, rs in lv.inputs]
    live = sum(b for b, _ in lv.inputs)
    peak = live
    for v in order:
        live += lv.out[v]
        peak = max(peak, live)
        for u in lv.preds[v]:
            waiting[u] -= 1
            if waiting[u] == 0 and u not in lv.keep:
                live -= lv.out[u]
        for i in lv.reads[v]:
            input_waiting[i] -= 1
            if input_waiting[i] == 0:
                live -= lv.inputs[i][0]
    return peak


def memory_aware_order(
    graph: LayerGraph, beam: int = 64, expansions: int = EXPANSIONS
) -> list[int]:
    """A topological order with a low activation peak (optimal while the beam cuts nothing and
    the ``expansions`` budget lasts; otherwise the best found, finished depth first)."""
    lv = _Liveness.of(graph)
    start = sum(b for b, _ in lv.inputs)
    roots = frozenset(v for v in range(len(graph)) if not lv.preds[v])
    # scheduled set -> (peak, live, order, ready layers)
    states: dict[frozenset[int], tuple] = {frozenset(): (start, start, (), roots)}
    spent = 0
    for step in range(len(graph)):
        # an expansion costs about as much as copying 200 set elements, and it copies its
        # scheduled set (``step`` layers) and its ready set
        width = sum(len(s[3]) * (200 + step + len(s[3])) for s in states.values())
        if spent + width > expansions:
            best_done, best = next(iter(states.items()))
            finished = [*best[2], *_depth_first(lv, best_done, best[2])]
            whole = _depth_first(lv, frozenset(), ())
            return min((finished, whole), key=lambda o: _peak(lv, o))
        spent += width
        nxt: dict[frozenset[int], tuple] = {}
        for done, (peak, live, order, ready) in states.items():
            for v in ready:
                now = done | {v}
                new_live = live + lv.out[v]
                new_peak = max(peak, new_live)
                new_live -= lv.freed(v, now)
                kept = nxt.get(now)
                if kept is None or (new_peak, new_live) < kept[:2]:
                    opened = {s for s in lv.succs[v] if lv.preds[s] <= now}
                    nxt[now] = (new_peak, new_live, (*order, v), (ready - {v}) | opened)
        states = dict(sorted(nxt.items(), key=lambda kv: kv[1][:2])[:beam])
    return list(next(iter(states.values()))[2])


def _depth_first(lv: _Liveness, done: frozenset[int], prefix: Sequence[int]) -> list[int]:
    """The layers not in ``done``, in a topological order that finishes the branch it is on
    before starting another (the most recently opened ready layer first; ties by index)."""
    n = len(lv.out)
    pending = [sum(1 for u in lv.preds[v] if u not in done) for v in range(n)]
    opened_late = {v for v in range(n) if v not in done and pending[v] == 0}
    # resume the prefix's branch first: layers it just opened go on top of the stack
    recent = [s for u in reversed(prefix[-1:]) for s in sorted(lv.succs[u]) if s in opened_late]
    stack = sorted(opened_late - set(recent), reverse=True) + sorted(recent, reverse=True)
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for s in sorted(lv.succs[v], reverse=True):
            pending[s] -= 1
            if pending[s] == 0:
                stack.append(s)
    return order
