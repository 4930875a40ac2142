"""Row (spatial) parts in the layer walk: the layers that run on bands of their output rows,
where each band's input rows come from, and where a chain's bands go. The bands themselves
(which layer runs on whose bands, each device's rows, which outputs stay as bands) are the
mapping's row layout, :func:`dse.mapping.rows.layout_of`; this module only carries it out.

* **On bands.** A layer whose layout root is set (a root split by rows, a row-local
  follower of one, or a join reading bands only) runs on bands: device d computes its output
  rows ``[lo, hi)`` (a join from the same rows of each of its inputs)
  (:func:`dse.net.ops.row_part`, the layer's whole weights) from the input rows they read
  (:func:`dse.net.window.needed`). A device whose band is empty computes nothing of the
  layer, and nothing is sent to it or gathered from it for it.
* **Input held whole** (on its owner, the graph input on the entry, a device that gathered
  or received it): a device holding it slices its rows itself (a Slice in its part's nodes);
  else the owner slices them (a Slice beside the action that made or gathered it there: its
  output, a tensor of its own, is sent at once) and the device receives that piece only. A
  band's device reads the input whole as a part's does (the all-gather rule): when it made a
  part of it, it gathers the whole and cuts its rows itself.
* **Input kept as bands** (a follower reading the bands before it, or a root reading the
  kept bands of another chain): every other device whose band overlaps the rows sends the
  overlap (a Slice of its band, an extra output of the action making that band: it leaves
  with that sub-model; the band itself when all of it is needed), and d concatenates the
  pieces and its own overlap in row order. With equal bands only halos cross.
* **A chain's last layer.** Its bands stay where they are when the layout keeps them; else
  they are all-gathered along the rows (axis 2) by the rule channel parts are gathered by
  (:meth:`dse.runtime.compile.programs._Walk.gather`), empty bands left out.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dse.errors import DseError
from dse.mapping import Mappings, rows
from dse.net import ops
from dse.net.graph import Layer, LayerGraph
from dse.net.onnx_load import TensorType
from dse.runtime.compile.actions import Action, add_part
from dse.runtime.compile.statics import Init, Statics

#: The tag of device d's band of a tensor or a layer: ``{tensor}.band{d}``.
TAG = ".band"


@dataclass(frozen=True)
class RowLayout:
    """Mapping 0's rows (:func:`dse.mapping.rows.layout_of`): each layer's root (-1: not on
    bands), each device's band ``[lo, hi)`` of its output rows, and whether they stay."""

    root: np.ndarray  # int64 [L]
    lo: np.ndarray  # int64 [L, D]
    hi: np.ndarray  # int64 [L, D]
    keep: np.ndarray  # bool [L]

    @staticmethod
    def of(graph: LayerGraph, mapping: Mappings) -> RowLayout:
        """The layout of mapping 0 (none at all when no layer is split by rows)."""
        n, n_dev = len(graph), mapping.sizes.shape[2]
        if not (np.asarray(mapping.axis[0]) == 1).any():
            empty = np.zeros((n, n_dev), dtype=np.int64)
            return RowLayout(np.full(n, -1, np.int64), empty, empty, np.zeros(n, bool))
        return RowLayout(*rows.layout_of(graph, mapping.sizes[0], mapping.axis[0]))

    def bands(self, layer: int) -> dict[int, tuple[int, int]]:
        """The non-empty bands of ``layer``: device -> [lo, hi), in device (= row) order."""
        lo, hi = self.lo[layer], self.hi[layer]
        return {d: (int(lo[d]), int(hi[d])) for d in np.flatnonzero(hi > lo).tolist()}


class _Walk(Protocol):
    """What the bands read and extend of the layer walk (:mod:`dse.runtime.compile.programs`): its
    graph, nodes, tensor types and statics, the row layout, where tensors are (whole: ``where``
    and ``has``; as bands: ``bands``) and made (``made_at``), every device's program, and
    its ways to add an action, insert one, send a tensor and gather parts."""

    graph: LayerGraph
    nodes: list[onnx.NodeProto]
    types: dict[str, TensorType]
    statics: Statics
    rows: RowLayout
    bands: dict[str, dict[int, tuple[int, int]]]
    where: dict[str, int]
    has: dict[str, set[int]]
    made_at: dict[tuple[str, int], int]
    owner: np.ndarray
    opset: int

    @property
    def programs(self) -> MutableMapping[int, list[Action]]: ...

    def add(self, d: int, act: Action, layer: int) -> None: ...

    def insert(self, d: int, at: int, act: Action) -> None: ...

    def transfer(self, t: str, src: int, dst: int) -> None: ...

    def gather(
        self,
        out: str,
        devs: list[int],
        bounds: list[tuple[int, int]],
        axis: int,
        c: int,
        tag: str = ".part",
    ) -> None: ...


def band_name(tensor: str, device: int) -> str:
    return f"{tensor}{TAG}{device}"


def with_rows(tt: TensorType, n: int) -> TensorType:
    """``tt`` with ``n`` rows (axis 2)."""
    shape = list(tt.shape)
    shape[2] = n
    return TensorType(tuple(shape), tt.elem_type)


def slice_rows(
    src: str, out: str, lo: int, hi: int, opset: int
) -> tuple[onnx.NodeProto, dict[str, Init]]:
    """A Slice of rows ``[lo, hi)`` (axis 2) of ``src`` into ``out``, in the form of the
    model's opset (inputs from opset 10, attributes before); its constant inputs."""
    if opset < 10:
        node = helper.make_node("Slice", [src], [out], name=out, starts=[lo], ends=[hi], axes=[2])
        return node, {}
    names = [f"{out}.starts", f"{out}.ends", f"{out}.axes"]
    values = ([lo], [hi], [2])
    inits: dict[str, Init] = {
        n: numpy_helper.from_array(np.array(v, dtype=np.int64), n)
        for n, v in zip(names, values, strict=True)
    }
    return helper.make_node("Slice", [src, *names], [out], name=out), inits


def run_on_bands(walk: _Walk, layer: Layer) -> None:
    """Every device's band of ``layer``, then where its bands go (module docstring)."""
    node = walk.nodes[layer.node]
    i, g = layer.index, walk.graph
    if len(layer.inputs) != 1 and not g.row_join[i]:
        raise DseError(
            f"layer '{layer.name}' runs on bands of rows but reads {len(layer.inputs)} "
            "activation tensors: only layers of one image input, and joins, can"
        )
    window = ops.row_window(layer)
    if window is None:
        raise DseError(f"layer '{layer.name}' ({layer.op}) cannot compute a band of its rows")
    out = node.output[0]
    in_rows = int(g.in_rows[i])
    bands = walk.rows.bands(i)
    for d, band in bands.items():
        lo, hi = window.needed(band[0], band[1], in_rows)
        act = Action("compute", layer=i)
        base = f"{out}{TAG}{d}"
        sources = {}  # each input's rows on d, by the input's name
        for k, t in enumerate(layer.inputs):
            if t.name not in sources:
                name = base if k == 0 else f"{base}.i{k}"
                sources[t.name] = _input_rows(walk, act, t.name, d, (lo, hi), name)
        part = ops.row_part(
            node, layer.name, band, (lo, hi), window, in_rows, f"{TAG}{d}",
            sources[layer.inputs[0].name], band_name(out, d), ops.row_columns(layer),
        )  # fmt: skip
        if g.row_join[i]:  # every input by name, wherever it stands among the node's
            del part.nodes[0].input[:]
            part.nodes[0].input.extend([sources.get(t, t) for t in node.input])
            part.keep = [t for t in node.input if t and t not in sources]
        add_part(act, part, walk.statics, True)
        act.makes = [band_name(out, d)]
        walk.types[band_name(out, d)] = with_rows(walk.types[out], band[1] - band[0])
        walk.has[band_name(out, d)] = {d}
        walk.add(d, act, i)
    nxt = int(g.follower[i])
    if (nxt >= 0 and walk.rows.root[nxt] == walk.rows.root[i]) or walk.rows.keep[i]:
        walk.bands[out] = bands  # read as bands: by the follower, or by the roots after it
        return
    devs = list(bands)
    walk.gather(out, devs, [bands[d] for d in devs], 2, int(walk.owner[i]), TAG)


def _input_rows(walk: _Walk, act: Action, x: str, d: int, rows_: tuple[int, int], base: str) -> str:
    """The tensor holding rows ``rows_`` of ``x`` on device ``d`` for ``act`` (which reads it):
    received, or made by nodes put into ``act`` (names from ``base``)."""
    if x in walk.bands:
        return _from_bands(walk, act, x, d, rows_, base)
    lo, hi = rows_
    whole = (lo, hi) == (0, int(walk.types[x].shape[2]))
    if d in walk.has[x]:
        act.reads.append(x)
        if whole:
            return x
        node, inits = slice_rows(x, f"{base}.in", lo, hi, walk.opset)
        act.nodes.append(node)
        act.inits.update(inits)
        return f"{base}.in"
    loc = walk.where[x]
    piece = x if whole else _whole_piece(walk, x, loc, lo, hi)
    _receive(walk, act, piece, loc, d)
    return piece


def _receive(walk: _Walk, act: Action, piece: str, src: int, d: int) -> None:
    """``piece`` (held on ``src``) to ``d`` unless it is there already; ``act`` reads it."""
    if d not in walk.has[piece]:
        walk.transfer(piece, src, d)
        walk.has[piece].add(d)
    act.reads.append(piece)


def _whole_piece(walk: _Walk, x: str, loc: int, lo: int, hi: int) -> str:
    """Rows ``[lo, hi)`` of ``x`` (whole on ``loc``) as a tensor of its own made on ``loc``
    right after ``x`` is: beside the computation that made it, or in an action of its own
    after the gather (or receive) that did, or first of all for a graph input."""
    piece = f"{x}.rows{lo}_{hi}"
    if (piece, loc) in walk.made_at:
        return piece
    node, inits = slice_rows(x, piece, lo, hi, walk.opset)
    idx = walk.made_at[(x, loc)]
    if idx >= 0 and walk.programs[loc][idx].kind == "compute":
        _beside(walk, loc, idx, node, inits, piece)
    else:
        slicer = Action("compute", nodes=[node], inits=inits, reads=[x], makes=[piece])
        walk.insert(loc, idx + 1, slicer)
    walk.types[piece] = with_rows(walk.types[x], hi - lo)
    walk.has[piece] = {loc}
    return piece


def _beside(
    walk: _Walk,
    dev: int,
    idx: int,
    node: onnx.NodeProto,
    inits: Mapping[str, Init],
    piece: str,
) -> None:
    """``node`` (making ``piece``) into action ``idx`` of ``dev``: an extra output of it."""
    act = walk.programs[dev][idx]
    act.nodes.append(node)
    act.inits.update(inits)
    act.makes.append(piece)
    walk.made_at[(piece, dev)] = idx


def _from_bands(walk: _Walk, act: Action, x: str, d: int, rows_: tuple[int, int], base: str) -> str:
    """Rows ``rows_`` of ``x`` (kept as bands) on ``d``: the overlap of every other device's
    band received, with ``d``'s own overlap, concatenated in row order in ``act``.

    A Concat in the part's own nodes rather than a gather step into a buffer of the rows: the
    assembled rows live only while the part's sub-model runs (a gather's buffer is allocated
    once and held by its rank for the whole run, one per layer), and the pieces are mostly
    halos of a few rows, received into buffers of their own."""
    lo, hi = rows_
    held = walk.bands[x]
    pieces: list[str] = []
    at = lo
    for e, (a_e, b_e) in held.items():
        a, b = max(lo, a_e), min(hi, b_e)
        if a >= b:
            continue
        if a != at:
            break
        at = b
        own = band_name(x, e)
        if e == d:
            act.reads.append(own)
            if (a, b) != (a_e, b_e):
                node, inits = slice_rows(own, f"{base}.own", a - a_e, b - a_e, walk.opset)
                act.nodes.append(node)
                act.inits.update(inits)
                own = f"{base}.own"
            pieces.append(own)
            continue
        piece = own if (a, b) == (a_e, b_e) else _band_piece(walk, x, e, a, b)
        _receive(walk, act, piece, e, d)
        pieces.append(piece)
    if at != hi:
        raise DseError(
            f"layer '{walk.graph.names[act.layer]}': rows [{at}, {hi}) of its input '{x}' are "
            "on no device's band of it"
        )
    if len(pieces) == 1:
        return pieces[0]
    act.nodes.append(helper.make_node("Concat", pieces, [f"{base}.in"], name=f"{base}.in", axis=2))
    return f"{base}.in"


def _band_piece(walk: _Walk, x: str, e: int, a: int, b: int) -> str:
    """Rows ``[a, b)`` of ``x`` cut from device ``e``'s band of it, an extra output of the
    action that makes that band (so it leaves with that sub-model)."""
    piece = f"{x}.rows{a}_{b}"
    if (piece, e) in walk.made_at:
        return piece
    own = band_name(x, e)
    a_e = walk.bands[x][e][0]
    node, inits = slice_rows(own, piece, a - a_e, b - a_e, walk.opset)
    _beside(walk, e, walk.made_at[(own, e)], node, inits, piece)
    walk.types[piece] = with_rows(walk.types[x], b - a)
    walk.has[piece] = {e}
    return piece
