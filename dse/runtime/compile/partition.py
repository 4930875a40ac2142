"""Partitioner: one mapping of a net -> per-device ONNX sub-models and a plan.

The plan follows the analytical model's schedule (``models_analytical/schedule/``) step for
step. Layers are visited in the graph's topological order; on every device that computes a
layer (or a part of it), each input tensor that lives elsewhere is received first, from the
device that holds it whole (its owner; the graph input lives on ``platform.entry``), and a
tensor crosses to a given device at most once. A split layer needs its whole input on every
part's device; part k computes the contiguous output-channel range the mapping's sizes give
(``Mappings.bounds``: cumulative sizes, devices in index order).

The parts are all-gathered: a device that computed a part and needs the whole output (it
computes a consumer of it, or a part of one) receives the other parts straight from the devices
that computed them, into its buffer of the whole (a ``gather`` step), without waiting for the
owner. The owner gathers likewise when it needs the whole (a consumer, a graph output) or must
forward it to a device that computed no part; then it sends the whole to those devices. No
other device receives parts, so every byte still crosses to a given device at most once.

A channel-local layer that follows a split layer (``LayerGraph.follows``: Relu, pooling,
BatchNormalization after a Conv) runs on the split layer's parts, each device on the part it made
(onnxruntime fuses Conv+Relu inside a part's sub-model), and its output is gathered in place of the
split layer's: a Conv -> Relu -> MaxPool over two devices sends pooled parts. Its device in the
mapping is where its output is gathered (its owner). :func:`dse.runtime.compile.programs.part_rows`
states the rule; the model's kernel applies the same one.

A layer split by rows (``Mappings.axis`` 1) runs as bands of its output rows, and so do the
row-local layers that follow it (:func:`dse.mapping.rows.layout_of` says which, and each
device's band; a follower that is not row-local, a GlobalAveragePool, runs whole on its own
device after the bands are gathered). Device d computes its band from the input rows it reads,
with the layer's whole weights; an empty band computes, sends and receives nothing. Those rows
come from where the input is whole (d cuts them itself when it holds it; else its holder cuts
them right after making or gathering it and sends that piece alone), or, where the input is
kept as bands (inside a chain, or between roots over the same devices), from the devices whose
bands overlap them: each sends the overlap beside its band, and d concatenates them in row
order (halos only when the bands match). A chain's last bands stay put where the layout keeps
them, else they are all-gathered along the rows (axis 2) as channel parts are. The rules are
:mod:`dse.mapping.rows`; their runtime side :mod:`dse.runtime.compile.bands`.

A device's work is cut into segments (one ONNX sub-model each) before every step that waits for a
remote tensor and after every step whose output another device can use at once, so its sends are
posted as soon as they are useful (:func:`dse.runtime.compile.segments.send_deadlines`). Sends are
non-blocking, every send is posted before the device's next receive, receives block in program
order, and every receive waits for a tensor made at an earlier layer (or, for a gather, at the same
layer's parts, each sent before its device gathers): work going A -> B -> A cannot deadlock.

The jobs, by module: static tensors and weights (:mod:`~dse.runtime.compile.statics`), each
device's program (:mod:`~dse.runtime.compile.programs`; its bands:
:mod:`~dse.runtime.compile.bands`; what it is made of: :mod:`~dse.runtime.compile.actions`),
cutting it into segments, their steps and sub-models (:mod:`~dse.runtime.compile.segments`), the
plan (:mod:`~dse.runtime.deployment.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from dse.errors import DseError
from dse.mapping import Mappings
from dse.net import Net
from dse.platform import Platform
from dse.runtime.compile.programs import check_mapping, device_programs
from dse.runtime.compile.segments import (
    Cutter,
    SubModelBuilder,
    dtype_name,
    first_readers,
    write_segment,
)
from dse.runtime.compile.statics import Blob, Statics, tensor_types, weight_source
from dse.runtime.deployment.plan import DType, Output, Plan, Port, RankPlan


@dataclass
class Deployment:
    """Sub-models by file name and the plan that says who runs, sends and receives what, in order;
    once deployed (:func:`dse.runtime.launch.deploy.deploy`), the whole model's outputs on the
    plan's input (``expected``, the equivalence check's reference)."""

    plan: Plan
    segments: dict[str, onnx.ModelProto] = field(repr=False)  # weights external, see blobs
    blobs: dict[str, list[tuple[int, Blob]]] = field(repr=False, default_factory=dict)
    expected: list[np.ndarray] | None = field(repr=False, default=None)

    def write_segments(self, directory: Path) -> None:
        """Every sub-model and its weight file into ``directory``."""
        for name, model in self.segments.items():
            write_segment(model, self.blobs.get(name, []), Path(directory) / name)


def partition(
    net: Net,
    mapping: Mappings,
    platform: Platform,
    weighted: onnx.ModelProto | None = None,
    seed: int = 0,
) -> Deployment:
    """Cut ``net`` by mapping 0 of ``mapping`` into per-device sub-models and a plan."""
    share, owner = check_mapping(net, platform, mapping)
    graph = net.graph
    locations: dict[str, tuple[Path, int, int]]
    if weighted is not None:
        model, locations = weighted, {}
    else:
        model, locations = weight_source(net, seed)
    nodes = list(model.graph.node)
    if len(nodes) != len(net.model.graph.node):
        raise DseError("the weighted model does not have the net's nodes")
    types = tensor_types(net)
    entry = int(platform.entry)
    statics = Statics(net, model, locations)
    programs = device_programs(net, mapping, share, owner, entry, statics, nodes, types)
    actions, start_sends, where = programs.actions, programs.start_sends, programs.where
    used = sorted(set(actions) | {entry} | set(start_sends))
    rank_of = {d: r for r, d in enumerate(used)}
    out_names = [t.name for t in graph.outputs]
    cut = Cutter(
        rank_of, types, out_names, where, SubModelBuilder(types, model), first_readers(actions)
    )
    ranks = []
    for d in used:
        initial = {t.name for t in graph.inputs} if d == entry else set()
        dev = platform.devices[d]
        steps, files = cut.steps(d, actions[d], start_sends[d], initial, dev.kind == "cpu")
        ranks.append(
            RankPlan(
                rank_of[d],
                dev.name,
                d,
                dev.host,
                "gpu" if dev.kind == "gpu" else "cpu",
                dev.threads,
                dev.memory_mb,
                files,
                steps,
            )
        )
    plan = Plan(
        net=net.name,
        fingerprint=net.fingerprint,
        mapping_hash=mapping.ident(0),
        platform=platform.name,
        seed=seed,
        inputs=[Port(t.name, *_spec(t.name, types)) for t in graph.inputs],
        outputs=[Output(t, *_spec(t, types), rank_of[where[t]]) for t in out_names],
        entry_rank=rank_of[entry],
        tensors=cut.tensors,
        ranks=ranks,
    )
    return Deployment(plan, cut.segments, cut.blobs)


def _spec(name: str, types: dict) -> tuple[tuple[int, ...], DType]:
    tt = types[name]
    return tuple(tt.shape), dtype_name(tt)
