"""Where a net's weight bytes lie on disk, so sub-models are cut from them without a copy.

A zoo net's seeded weights are stored inline in its ONNX file: a small scan of the protobuf
wire format finds each initializer's ``raw_data`` (offset, length) without parsing the model.
Weights stored as external data are found from their ``external_data`` entries. Either way
the bytes are memory-mapped: slicing a weight reads only the pages it needs.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import onnx
from onnx import TensorProto

from dse.net import Net, zoo
from dse.net.onnx_load import external_location

#: Field numbers of the protobuf messages read here (onnx.proto).
MODEL_GRAPH, GRAPH_INITIALIZER, TENSOR_NAME, TENSOR_RAW_DATA = 7, 5, 8, 9


def _varint(buf: mmap.mmap | bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf: mmap.mmap | bytes, start: int, end: int):
    """(field number, start, end) of the length-delimited fields in ``buf[start:end]``."""
    i = start
    while i < end:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i)
            yield number, i, i + n
            i += n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {i}")


def inline_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """Initializer name -> (offset, length) of its raw_data in the ONNX file ``path``."""
    out: dict[str, tuple[int, int]] = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for number, s, e in _fields(buf, 0, len(buf)):
            if number != MODEL_GRAPH:
                continue
            for gnum, gs, ge in _fields(buf, s, e):
                if gnum != GRAPH_INITIALIZER:
                    continue
                name, raw = None, None
                for tnum, ts, te in _fields(buf, gs, ge):
                    if tnum == TENSOR_NAME:
                        name = bytes(buf[ts:te]).decode()
                    elif tnum == TENSOR_RAW_DATA:
                        raw = (ts, te - ts)
                if name is not None and raw is not None:
                    out[name] = raw
    return out


def external_locations(model: onnx.ModelProto, base: Path) -> dict[str, tuple[Path, int, int]]:
    """Initializer name -> (file, offset, length) of the weights stored as external data,
    each checked by the loader's rule (:func:`dse.net.onnx_load.external_location`: inside
    ``base``, and holding the bytes the weight declares)."""
    return {
        t.name: external_location(t, base)
        for t in model.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
    }


class MappedFiles:
    """Read-only memory maps of weight files, opened once each."""

    def __init__(self) -> None:
        self._maps: dict[Path, mmap.mmap] = {}

    def view(self, path: Path, offset: int, length: int) -> memoryview:
        if path not in self._maps:
            with open(path, "rb") as f:
                self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._maps[path]
        end = len(buf) if length < 0 else offset + length
        if end > len(buf):
            raise ValueError(f"{path} is shorter than its weights say ({end} > {len(buf)} bytes)")
        return memoryview(buf)[offset:end]


def weight_source(net: Net, seed: int) -> tuple[onnx.ModelProto, dict[str, tuple[Path, int, int]]]:
    """The model whose initializers describe the weights, and where their bytes lie on disk:
    a zoo net's seeded file (scanned, not parsed), or a file's external data; weights stored
    inline in a user's file are already in ``net.model``."""
    if net.path is not None:
        return net.model, external_locations(net.model, Path(net.path).parent)
    path = zoo.materialize(net.name, seed)
    try:
        offsets = inline_offsets(path)
    except (ValueError, IndexError, OSError):
        return net.weighted_model(seed), {}
    return net.model, {name: (path, off, n) for name, (off, n) in offsets.items()}
