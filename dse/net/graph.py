"""The layer graph: an ONNX model reduced to the numbers the cost models need.

Built once per network (:func:`dse.net.build.build_graph`) and immutable. Layers are the
model's compute nodes in a fixed topological order; shape-computation nodes (Shape, Constant,
Gather on shapes, ...) are folded into static tensors and are not layers. Per-layer quantities
are numpy arrays indexed by layer position; edges are per tensor, so a tensor consumed twice on
one device is counted once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dse.net import ops


@dataclass(frozen=True)
class Tensor:
    """A named tensor with its static shape and element size in bytes."""

    name: str
    shape: tuple[int, ...]
    itemsize: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layer:
    """One compute node of the network."""

    index: int
    name: str
    op: str
    inputs: tuple[Tensor, ...]  # activations (graph inputs or other layers' outputs)
    outputs: tuple[Tensor, ...]
    weights: tuple[Tensor, ...]  # static inputs: initializers, Constant-node and folded tensors
    macs: int
    params: int
    out_channels: int
    splittable: bool
    estimated: bool  # True when the op had no MAC rule and MACs were estimated
    node: int = -1  # position of its node in the ONNX model's graph.node
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.weights)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.outputs[0].shape if self.outputs else ()


@dataclass(frozen=True)
class LayerGraph:
    """An immutable layer graph in topological order.

    ``edge_src[e] -> edge_dst[e]`` carries tensor ``edge_tensor[e]`` of ``edge_bytes[e]``
    bytes; ``edge_src`` is -1 for a graph input.
    """

    name: str
    layers: tuple[Layer, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    edge_tensor: tuple[str, ...]
    unique_params: int
    unique_weight_bytes: int
    producer: dict[str, int] = field(repr=False)  # tensor name -> producing layer index

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def _array(self, attr: str, dtype: type) -> np.ndarray:
        arr: np.ndarray = np.array([getattr(layer, attr) for layer in self.layers], dtype=dtype)
        arr.setflags(write=False)
        return arr

    @cached_property
    def macs(self) -> np.ndarray:
        return self._array("macs", np.int64)

    @cached_property
    def params(self) -> np.ndarray:
        return self._array("params", np.int64)

    @cached_property
    def weight_bytes(self) -> np.ndarray:
        return self._array("weight_bytes", np.int64)

    @cached_property
    def output_bytes(self) -> np.ndarray:
        return self._array("output_bytes", np.int64)

    @cached_property
    def out_channels(self) -> np.ndarray:
        return self._array("out_channels", np.int64)

    @cached_property
    def splittable(self) -> np.ndarray:
        return self._array("splittable", bool)

    @cached_property
    def follows(self) -> np.ndarray:
        """int64 [L]: the layer whose output-channel split this layer continues, else -1.

        Layer c follows p when c is channel-local (:func:`dse.net.ops.local`: ``"any"``, or
        ``"axis1"`` when the split is by axis 1), its one activation input is p's
        one output, nobody else reads that output (nor is it a graph output), and p is
        splittable or itself follows a layer. Where p is split, c runs on p's parts, part by
        part, and c's output is gathered instead of p's (model and runtime alike): Conv -> Relu
        -> MaxPool over two devices gathers the pooled parts.
        """
        n = len(self.layers)
        follows = np.full(n, -1, dtype=np.int64)
        n_in = np.bincount(self.edge_dst, minlength=n)
        reads = self.edge_src >= 0
        n_out = np.bincount(self.edge_src[reads], minlength=n)
        outputs = {t.name for t in self.outputs}
        axis1 = np.zeros(n, dtype=bool)  # the chain's root splits channels on axis 1
        for e in np.flatnonzero(reads)[np.argsort(self.edge_dst[reads], kind="stable")]:
            p, c = int(self.edge_src[e]), int(self.edge_dst[e])
            lp, lc = self.layers[p], self.layers[c]
            if n_in[c] != 1 or n_out[p] != 1 or len(lp.outputs) != 1 or len(lc.outputs) != 1:
                continue
            if lp.outputs[0].name in outputs:
                continue
            if lp.splittable:
                split = ops.channel_split(lp.op)
                assert split is not None  # splittable only where the op has a channel split
                axis1[p] = split.axis == 1
            elif follows[p] < 0:
                continue
            kind = ops.local(lc.op)
            if kind == "any" or (kind == "axis1" and axis1[p]):
                follows[c], axis1[c] = p, axis1[p]
        follows.setflags(write=False)
        return follows

    @cached_property
    def follower(self) -> np.ndarray:
        """int64 [L]: the layer that follows each layer (:attr:`follows`), else -1."""
        follower = np.full(len(self.layers), -1, dtype=np.int64)
        has = self.follows >= 0
        follower[self.follows[has]] = np.flatnonzero(has)
        follower.setflags(write=False)
        return follower

    @cached_property
    def _rows(self) -> tuple[np.ndarray, ...]:
        """Each layer's row window (:func:`dse.net.ops.row_window`) as arrays: row-local,
        stride, span, top pad, input rows, output rows (0 where not 4-D) and transposed."""
        n = len(self.layers)
        local, transposed = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        stride, span, pad = np.ones(n, np.int64), np.ones(n, np.int64), np.zeros(n, np.int64)
        in_rows, out_rows = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for i, layer in enumerate(self.layers):
            if len(layer.output_shape) == 4:
                out_rows[i] = layer.output_shape[2]
            if layer.inputs and len(layer.inputs[0].shape) == 4:
                in_rows[i] = layer.inputs[0].shape[2]
            w = ops.row_window(layer)
            if w is not None and out_rows[i] > 0 and in_rows[i] > 0:
                local[i] = True
                stride[i], span[i], pad[i] = w.stride, w.span, w.pad
                transposed[i] = w.transposed
        arrays = (local, stride, span, pad, in_rows, out_rows, transposed)
        for a in arrays:
            a.setflags(write=False)
        return arrays

    @property
    def row_local(self) -> np.ndarray:
        """bool [L]: the layer computes a band of its output rows (axis 2 of NCHW) from a band
        of its first input's rows (:func:`dse.net.ops.row_window`)."""
        return self._rows[0]

    @property
    def row_stride(self) -> np.ndarray:
        """int64 [L]: output row o reads input rows from ``o * row_stride - row_pad``, ..."""
        return self._rows[1]

    @property
    def row_span(self) -> np.ndarray:
        """int64 [L]: ... ``row_span`` of them (kernel rows x dilation), clipped to the input."""
        return self._rows[2]

    @property
    def row_pad(self) -> np.ndarray:
        """int64 [L]: the top padding of the row window."""
        return self._rows[3]

    @property
    def in_rows(self) -> np.ndarray:
        """int64 [L]: rows of the first activation input (axis 2; 0 where not 4-D)."""
        return self._rows[4]

    @property
    def out_rows(self) -> np.ndarray:
        """int64 [L]: rows of the output (axis 2; 0 where not 4-D)."""
        return self._rows[5]

    @property
    def row_transposed(self) -> np.ndarray:
        """bool [L]: the window runs the other way (a ConvTranspose: input row i reaches output
        rows from ``i * row_stride - row_pad``, ``row_span`` of them)."""
        return self._rows[6]

    @cached_property
    def row_splittable(self) -> np.ndarray:
        """bool [L]: a splittable layer that can also split by output rows (a Conv, a
        ConvTranspose where its rows fit)."""
        out = self.splittable & self.row_local & (self.out_rows >= 1)
        out.setflags(write=False)
        return out

    @cached_property
    def row_chain(self) -> np.ndarray:
        """bool [L]: where the layer's root (the split layer it :attr:`follows`, through its
        chain) splits by rows, the layer runs on the root's bands: it and every layer of the
        chain before it are row-local. A root itself: :attr:`row_splittable`."""
        chain = self.row_splittable.copy()
        for c in range(len(self.layers)):  # topological: a layer's root comes first
            p = int(self.follows[c])
            if p >= 0:
                chain[c] = bool(chain[p] and self.row_local[c])
        chain.setflags(write=False)
        return chain

    @cached_property
    def row_join(self) -> np.ndarray:
        """bool [L]: a layer not split itself that runs on bands of rows where all its inputs
        are on bands over the same devices (:func:`dse.mapping.rows.row_layout`): row-local,
        not splittable, following no layer (a follower runs on its root's bands already), and
        every activation input as tall as the first (Add, Mul, Concat along the channels, an
        activation or a pooling after them)."""
        out = self.row_local & ~self.splittable & (self.follows < 0)
        for i in np.flatnonzero(out).tolist():
            ins = self.layers[i].inputs
            out[i] = bool(ins) and all(
                len(t.shape) == 4 and int(t.shape[2]) == int(self.in_rows[i]) for t in ins
            )
        out.setflags(write=False)
        return out

    @cached_property
    def split_layers(self) -> np.ndarray:
        """int64 [S]: the splittable layers, in graph order (index s of a mapping's sizes)."""
        out = np.flatnonzero(self.splittable).astype(np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def first_consumer(self) -> np.ndarray:
        """int64 [L]: the first layer (in topological order) that reads each layer's output, or
        -1."""
        first = np.full(len(self.layers), -1, dtype=np.int64)
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist(), strict=True):
            if s >= 0 and (first[s] < 0 or d < first[s]):
                first[s] = d
        first.setflags(write=False)
        return first

    @cached_property
    def first_producer(self) -> np.ndarray:
        """int64 [L]: the producer of each layer's first activation input, or -1 (a graph
        input)."""
        prod = np.full(len(self.layers), -1, dtype=np.int64)
        seen = np.zeros(len(self.layers), dtype=bool)
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist(), strict=True):
            if not seen[d]:
                prod[d], seen[d] = s, True
        prod.setflags(write=False)
        return prod

    @cached_property
    def estimated(self) -> np.ndarray:
        return self._array("estimated", bool)

    @cached_property
    def ops(self) -> tuple[str, ...]:
        return tuple(layer.op for layer in self.layers)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)

    @cached_property
    def index(self) -> dict[str, int]:
        return {layer.name: layer.index for layer in self.layers}

    def reordered(self, order: Sequence[int]) -> LayerGraph:
        """The same graph with its layers in another topological ``order``."""
        order = [int(i) for i in order]
        if sorted(order) != list(range(len(self.layers))):
            raise ValueError("order must be a permutation of the layers")
        pos = {old: new for new, old in enumerate(order)}
        src = np.array([pos[s] if s >= 0 else -1 for s in self.edge_src.tolist()], dtype=np.int64)
        dst = np.array([pos[d] for d in self.edge_dst.tolist()], dtype=np.int64)
        if ((src >= dst) & (src >= 0)).any():
            raise ValueError("order is not topological")
        for a in (src, dst):
            a.setflags(write=False)
        return LayerGraph(
            name=self.name,
            layers=tuple(
                dataclasses.replace(self.layers[old], index=new) for new, old in enumerate(order)
            ),
            inputs=self.inputs,
            outputs=self.outputs,
            edge_src=src,
            edge_dst=dst,
            edge_bytes=self.edge_bytes,
            edge_tensor=self.edge_tensor,
            unique_params=self.unique_params,
            unique_weight_bytes=self.unique_weight_bytes,
            producer={t: pos[i] for t, i in self.producer.items()},
        )

    def totals(self) -> dict[str, int]:
        return {
            "macs": int(self.macs.sum()),
            "params": self.unique_params,
            "weight_bytes": self.unique_weight_bytes,
            "layers": len(self.layers),
        }
