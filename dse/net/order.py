"""Peak activation memory of an execution order, and a memory-aware order (seed 002).

Allocate-then-free: running a layer first allocates its outputs, then frees every tensor whose
readers have all run (graph inputs are live from the start). The peak depends on the order of
independent branches; :func:`memory_aware_order` searches topological orders with Serenity's
dynamic programme: one best partial schedule (lowest peak, then lowest live bytes) per set of
scheduled layers, bounded by a beam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dse.net.graph import LayerGraph


@dataclass(frozen=True)
class _Liveness:
    preds: list[frozenset[int]]
    succs: list[frozenset[int]]
    out: list[int]  # bytes each layer allocates
    keep: frozenset[int]  # layers whose outputs are graph outputs (never freed)
    inputs: list[tuple[int, frozenset[int]]]  # graph-input bytes and their readers

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
                readers[name].add(d)
        keep = frozenset(graph.producer[t.name] for t in graph.outputs if t.name in graph.producer)
        inputs = [(t.nbytes, frozenset(readers[t.name])) for t in graph.inputs]
        return cls(
            [frozenset(p) for p in preds],
            [frozenset(s) for s in succs],
            graph.output_bytes.tolist(),
            keep,
            inputs,
        )

    def freed(self, v: int, done: frozenset[int] | set[int]) -> int:
        """Bytes freed once ``v`` has run, ``done`` including ``v``."""
        nbytes = sum(
            self.out[u] for u in self.preds[v] if u not in self.keep and self.succs[u] <= done
        )
        return nbytes + sum(b for b, rs in self.inputs if v in rs and rs <= done)


def peak_memory(graph: LayerGraph, order: Sequence[int]) -> int:
    """Peak bytes of live activations when running ``order`` on one device."""
    lv = _Liveness.of(graph)
    live = sum(b for b, _ in lv.inputs)
    peak, done = live, set()
    for v in order:
        live += lv.out[v]
        peak = max(peak, live)
        done.add(v)
        live -= lv.freed(v, done)
    return peak


def memory_aware_order(graph: LayerGraph, beam: int = 64) -> list[int]:
    """A topological order with a low activation peak (optimal while the beam cuts nothing)."""
    lv = _Liveness.of(graph)
    start = sum(b for b, _ in lv.inputs)
    roots = frozenset(v for v in range(len(graph)) if not lv.preds[v])
    # scheduled set -> (peak, live, order, ready layers)
    states = {frozenset(): (start, start, (), roots)}
    for _ in range(len(graph)):
        nxt: dict[frozenset[int], tuple] = {}
        for done, (peak, live, order, ready) in states.items():
            for v in ready:
                now = done | {v}
                new_live = live + lv.out[v]
                new_peak = max(peak, new_live)
                new_live -= lv.freed(v, now)
                best = nxt.get(now)
                if best is None or (new_peak, new_live) < best[:2]:
                    opened = {s for s in lv.succs[v] if lv.preds[s] <= now}
                    nxt[now] = (new_peak, new_live, (*order, v), (ready - {v}) | opened)
        states = dict(sorted(nxt.items(), key=lambda kv: kv[1][:2])[:beam])
    return list(next(iter(states.values()))[2])
