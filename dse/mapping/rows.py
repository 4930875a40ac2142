"""The rules of row (spatial) splits, compiled once for the model and the runtime alike.

A splittable layer split by rows (``Mappings.axis`` 1, several parts) gives device d the band
of its output rows ``[lo, hi)`` its sizes say, bands contiguous in device order as channel
parts are. Everything else follows from these rules, written here and nowhere else:

* **Followers on bands.** A layer that follows it (``LayerGraph.follows``: Relu,
  BatchNormalization, pooling after a Conv) runs on the bands too where it and the chain
  before it are row-local (``LayerGraph.row_chain``). Its band on a device is ``[F(a), F(b))``
  for the band ``[a, b)`` of its input there: ``F(0) = 0``, ``F(in_rows) = out_rows``, else
  ``F(x) = min(out_rows, ceil((x + pad) / stride))``: output row o goes to the device whose
  band holds the first input row its window reads (clamped to 0). A band may be empty.
* **Needed rows.** A band ``[o0, o1)`` reads the input rows ``[o0 x stride - pad, (o1 - 1) x
  stride - pad + span)`` clipped to the input (:func:`needed`); an empty band none. A
  transposed convolution's window runs the other way (:func:`needed` with ``transposed``).
* **Joins.** A layer not split itself that reads bands (``LayerGraph.row_join``: an Add, Mul
  or Concat along the channels, an activation or a pooling after one) runs on bands too where
  every input is on bands over the same devices: on its first input's bands carried through
  its window as a follower's are, each device reading its rows of every input (its own, and
  halos or pieces from the others).
* **Bands kept or gathered.** The output of the last layer of a chain on bands stays as bands
  (each device keeping its own, the next layer fetching the rows it needs from the devices
  holding them: halos) when it is no graph output and every layer reading it is a root split
  by rows, or a join, over the same devices; else its bands are gathered along the rows, as
  channel parts are gathered (:func:`row_layout`). A join one of whose inputs is gathered runs
  whole after all.

The model's kernel (:mod:`models_analytical.schedule`) and the runtime's partitioner
(:mod:`dse.runtime.compile.programs`) both call :func:`row_layout`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dse.net.window import needed

__all__ = ["follow", "layout_of", "needed", "row_layout"]


@njit(cache=True, nogil=True)
def follow(x, stride, pad, in_rows, out_rows):
    """F(x): where input row boundary x falls among the output rows (module docstring)."""
    if x <= 0:
        return 0
    if x >= in_rows:
        return out_rows
    return min(out_rows, (x + pad + stride - 1) // stride)


@njit(cache=True, nogil=True)
def row_layout(
    sizes,
    axis,
    split_index,
    follows,
    row_chain,
    row_join,
    stride,
    pad,
    in_rows,
    out_rows,
    in_ptr,
    in_src,
    out_ptr,
    out_dst,
    is_output,
    root,
    band_lo,
    band_hi,
    keep,
):
    """One mapping's rows: ``sizes[S, D]`` and ``axis[S]`` (its whole numbers);
    ``split_index[L]`` each layer's index among the splittable ones (-1: not splittable);
    the graph's ``follows``, ``row_chain``, ``row_join``, ``row_stride``, ``row_pad``,
    ``in_rows``, ``out_rows`` [L], its inputs (``in_ptr`` [L+1], ``in_src``: CSR, -1 the
    graph input), its consumers (``out_ptr`` [L+1], ``out_dst``) and ``is_output`` [L].
    Fills ``root[L]`` (the root split by rows whose bands each layer runs on, the layer itself
    for a join, -1: none), ``band_lo`` / ``band_hi`` [L, D] (each device's output rows of such
    a layer; 0, 0 for a device without a part) and ``keep[L]`` (the layer's output stays as
    bands)."""
    n_layers, n_dev = band_lo.shape
    for layer in range(n_layers):
        root[layer] = -1
        keep[layer] = False
        for d in range(n_dev):
            band_lo[layer, d] = 0
            band_hi[layer, d] = 0
        s = split_index[layer]
        if s >= 0 and axis[s] == 1:
            parts = 0
            for d in range(n_dev):
                if sizes[s, d] > 0:
                    parts += 1
            if parts > 1:
                root[layer] = layer
                at = 0
                for d in range(n_dev):
                    if sizes[s, d] > 0:
                        band_lo[layer, d] = at
                        at += sizes[s, d]
                        band_hi[layer, d] = at
                continue
        p = follows[layer]
        if p >= 0 and root[p] >= 0 and row_chain[layer]:
            root[layer] = root[p]
            r = root[p]
            for d in range(n_dev):
                if sizes[split_index[r], d] > 0:  # a device of the root's parts
                    follow_band(layer, p, d, stride, pad, in_rows, out_rows, band_lo, band_hi)
            continue
        if row_join[layer] and join_inputs_on_bands(layer, in_ptr, in_src, root, band_lo, band_hi):
            root[layer] = layer  # a join: on the bands of its first input
            first = in_src[in_ptr[layer]]
            for d in range(n_dev):
                if band_hi[first, d] > band_lo[first, d]:
                    follow_band(layer, first, d, stride, pad, in_rows, out_rows, band_lo, band_hi)
    # a chain's last layer keeps its bands where every reader is a root or a join on the same
    # devices; a join whose inputs do not all stay as bands runs whole after all, which may
    # leave another's inputs without a reason to stay: again until nothing changes
    changed = True
    while changed:
        for layer in range(n_layers):
            keep[layer] = kept_bands(
                layer, sizes, split_index, root, band_lo, band_hi, out_ptr, out_dst, is_output
            )
        changed = False
        for layer in range(n_layers):
            if root[layer] != layer or split_index[layer] >= 0:
                continue  # not a join
            for e in range(in_ptr[layer], in_ptr[layer + 1]):
                if not keep[in_src[e]]:
                    root[layer] = -1
                    for d in range(n_dev):
                        band_lo[layer, d] = 0
                        band_hi[layer, d] = 0
                    changed = True
                    break


@njit(cache=True, nogil=True)
def follow_band(layer, p, d, stride, pad, in_rows, out_rows, band_lo, band_hi):
    """Device d's band of ``layer``: its band of ``p``, the layer ``layer`` reads, carried
    through ``layer``'s window (:func:`follow` of both ends)."""
    s, q, n_in, n_out = stride[layer], pad[layer], in_rows[layer], out_rows[layer]
    band_lo[layer, d] = follow(band_lo[p, d], s, q, n_in, n_out)
    band_hi[layer, d] = follow(band_hi[p, d], s, q, n_in, n_out)


@njit(cache=True, nogil=True)
def join_inputs_on_bands(layer, in_ptr, in_src, root, band_lo, band_hi):
    """Whether every input of ``layer`` is on bands, all of them on the same devices."""
    first = in_src[in_ptr[layer]]
    for e in range(in_ptr[layer], in_ptr[layer + 1]):
        src = in_src[e]
        if src < 0 or root[src] < 0:
            return False
        for d in range(band_lo.shape[1]):
            if (band_hi[src, d] > band_lo[src, d]) != (band_hi[first, d] > band_lo[first, d]):
                return False
    return True


@njit(cache=True, nogil=True)
def kept_bands(layer, sizes, split_index, root, band_lo, band_hi, out_ptr, out_dst, is_output):
    """Whether ``layer``'s output stays as bands: it is on bands, no graph output, read, and
    every reader is a root split by rows over the same devices or a join on its bands' devices
    (not a follower on the same bands: the layer would not be its chain's last)."""
    r = root[layer]
    if r < 0 or is_output[layer] or out_ptr[layer + 1] == out_ptr[layer]:
        return False
    n_dev = band_lo.shape[1]
    for j in range(out_ptr[layer], out_ptr[layer + 1]):
        c = out_dst[j]
        if root[c] == r or root[c] != c:
            return False
        sc = split_index[c]
        for d in range(n_dev):
            if split_index[r] >= 0:  # a chain of a root split by rows: its root's devices
                here = sizes[split_index[r], d] > 0
            else:  # a join: the devices of its bands
                here = band_hi[layer, d] > band_lo[layer, d]
            there = sizes[sc, d] > 0 if sc >= 0 else band_hi[c, d] > band_lo[c, d]
            if here != there:
                return False
    return True


def layout_of(graph, sizes: np.ndarray, axis: np.ndarray) -> tuple[np.ndarray, ...]:  # noqa: ANN001
    """:func:`row_layout` of one mapping (``sizes[S, D]``, ``axis[S]``) of ``graph`` (a
    :class:`~dse.net.graph.LayerGraph`): ``root``, ``band_lo``, ``band_hi``, ``keep``."""
    n, n_dev = len(graph), sizes.shape[1]
    split_index = np.full(n, -1, dtype=np.int64)
    split_index[graph.split_layers] = np.arange(len(graph.split_layers))
    out_ptr, out_dst = consumers(graph)
    in_ptr, in_src, _ = producers(graph.edge_src, graph.edge_dst, n)
    is_output = np.zeros(n, dtype=bool)
    names = {t.name for t in graph.outputs}
    for layer in graph:
        is_output[layer.index] = any(t.name in names for t in layer.outputs)
    root = np.empty(n, dtype=np.int64)
    band_lo = np.empty((n, n_dev), dtype=np.int64)
    band_hi = np.empty((n, n_dev), dtype=np.int64)
    keep = np.empty(n, dtype=bool)
    row_layout(  # sizes int32 and axis int8, as the kernel passes them: one compiled version
        np.ascontiguousarray(sizes, dtype=np.int32),
        np.ascontiguousarray(axis, dtype=np.int8),
        split_index,
        graph.follows,
        graph.row_chain,
        graph.row_join,
        graph.row_stride,
        graph.row_pad,
        graph.in_rows,
        graph.out_rows,
        in_ptr,
        in_src,
        out_ptr,
        out_dst,
        is_output,
        root,
        band_lo,
        band_hi,
        keep,
    )
    return root, band_lo, band_hi, keep


def consumers(graph) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """The layers reading each layer's output, as CSR (``out_ptr`` [L+1], ``out_dst``), each
    consumer once, in topological order."""
    n = len(graph)
    lists: list[set[int]] = [set() for _ in range(n)]
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if s >= 0:
            lists[s].add(d)
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    dst = np.array([c for x in lists for c in sorted(x)], dtype=np.int64)
    return ptr, dst


def producers(
    edge_src: np.ndarray, edge_dst: np.ndarray, n_layers: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each layer's activation inputs as CSR (``in_ptr`` [L+1], ``in_src``: the producing
    layer, -1 for a graph input) from a graph's edges, in their order, and that order of the
    edges (``order``): the one order the row layout and the model's kernel read them in
    (:func:`models_analytical.schedule.inputs.input_csr` builds on it)."""
    order = np.argsort(edge_dst, kind="stable")
    ptr = np.zeros(n_layers + 1, dtype=np.int64)
    np.add.at(ptr, edge_dst[order] + 1, 1)
    return np.cumsum(ptr), edge_src[order].astype(np.int64), order
