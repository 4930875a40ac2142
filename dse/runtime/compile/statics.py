"""Static tensors of a net (weights, Constant-node outputs, folded shape tensors) for sub-models,
and where a net's weight bytes lie on disk, so sub-models are cut from them without a copy.

A weight stays where its bytes are until a sub-model is written: a :class:`Blob` names it and
the cuts a part takes of it. A zoo net's seeded weights are stored inline in its ONNX file: a
small scan of the protobuf wire format finds each initializer's ``raw_data`` (offset, length)
without parsing the model. Weights stored as external data are found from their
``external_data`` entries. Either way the bytes are memory-mapped: slicing a weight reads only
the pages it needs.
"""

from __future__ import annotations

import mmap
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dse.errors import DseError
from dse.net import Net, zoo
from dse.net.onnx_load import (
    TensorType,
    external_location,
    fold_constants,
    infer_types,
    unfolded_root,
)

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


#: Weights at least this large go to a sub-model's external data file, written straight from
#: the (sliced) source array: no protobuf copy of the bytes.
EXTERNAL_MIN_BYTES = 1024


class Statics:
    """Values of the static tensors (weights, Constant-node outputs, folded shape tensors)."""

    def __init__(
        self,
        net: Net,
        weighted: onnx.ModelProto,
        locations: dict[str, tuple[Path, int, int]] | None = None,
    ) -> None:
        self.net = net
        self.inits = {t.name: t for t in weighted.graph.initializer}
        self.locations = locations or {}  # weights read from files (memory-mapped)
        self.files = MappedFiles()
        self.constants = {
            n.output[0]: n for n in weighted.graph.node if n.op_type == "Constant" and n.output
        }
        self._folded: dict[str, TensorProto] | None = None
        self._arrays: dict[str, np.ndarray] = {}

    def proto(self, name: str) -> TensorProto:
        if name in self.inits:
            return self.inits[name]
        if name in self.constants:
            return constant_value(self.constants[name], name)
        if self._folded is None:
            folded = fold_constants(self._with_small_data(), tensor_types(self.net))
            self._folded = {t.name: t for t in folded.graph.initializer}
        if name not in self._folded:
            acts = {t.name for layer in self.net.graph for t in (*layer.inputs, *layer.outputs)}
            node = unfolded_root(self.net.model, name, {*self._folded, *self.inits, *acts})
            raise DseError(
                f"static tensor '{name}' of net '{self.net.name}' cannot be evaluated for the "
                f"sub-models: node '{node.name}' ({node.op_type}) does not fold to a constant at "
                "this input shape; fold it with onnxruntime (python -m "
                "onnxruntime.tools.optimize_onnx_model --opt_level basic IN OUT) and load that"
            )
        return self._folded[name]

    def _with_small_data(self) -> onnx.ModelProto:
        """The net's model with its small mapped weights (shapes, axes) inline, to fold."""
        if not self.locations:
            return self.net.model
        model = onnx.ModelProto()
        model.CopyFrom(self.net.model)
        for t in model.graph.initializer:
            if t.name in self.locations and self.locations[t.name][2] <= 1 << 20:
                data = bytes(self.files.view(*self.locations[t.name]))
                del t.external_data[:]
                t.data_location = TensorProto.DEFAULT
                t.raw_data = data
        return model

    def array(self, name: str) -> np.ndarray:
        """The value, decoded once (a read-only view of the stored bytes where possible)."""
        if name not in self._arrays and name in self.locations:
            t = self.proto(name)
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
            view = self.files.view(*self.locations[name])
            self._arrays[name] = np.frombuffer(view, dtype=dtype).reshape(tuple(t.dims))
        if name not in self._arrays:
            t = self.proto(name)
            if t.data_location == TensorProto.EXTERNAL:
                raise DseError(f"weight '{name}' has no data loaded (its external data is missing)")
            raw = t.raw_data if t.HasField("raw_data") else b""
            if raw and sys.byteorder == "little":
                dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
                arr = np.frombuffer(raw, dtype=dtype).reshape(tuple(t.dims))
            else:
                arr = numpy_helper.to_array(t)
            self._arrays[name] = arr
        return self._arrays[name]


def constant_value(node: onnx.NodeProto, name: str) -> TensorProto:
    """The value of a Constant node's output."""
    g = helper.make_graph([node], "c", [], [helper.make_empty_tensor_value_info(name)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (value,) = ReferenceEvaluator(m).run(None, {})
    return numpy_helper.from_array(np.asarray(value), name)


@dataclass(frozen=True)
class Blob:
    """A weight of a sub-model: ``statics[src]`` cut by ``(axis, lo, hi)`` slices."""

    statics: Statics = field(repr=False)
    src: str
    cuts: tuple[tuple[int, int, int], ...] = ()

    def dims(self) -> list[int]:
        dims = list(self.statics.proto(self.src).dims)
        for axis, lo, hi in self.cuts:
            dims[axis] = hi - lo
        return dims

    def value(self) -> np.ndarray:
        arr = self.statics.array(self.src)
        for axis, lo, hi in self.cuts:
            index = [slice(None)] * arr.ndim
            index[axis] = slice(lo, hi)
            arr = arr[tuple(index)]
        return np.ascontiguousarray(arr)


#: An initializer of a sub-model: small tensors inline, weights as blobs.
Init = TensorProto | Blob


def tensor_types(net: Net) -> dict[str, TensorType]:
    """Every tensor's shape and element type (inferred; by item size where inference gives
    none)."""
    types = {k: v for k, v in infer_types(net.model).items() if v is not None}
    fallback = {
        4: TensorProto.FLOAT,
        8: TensorProto.INT64,
        2: TensorProto.FLOAT16,
        1: TensorProto.UINT8,
    }
    for layer in net.graph:
        for t in (*layer.inputs, *layer.outputs):
            if t.name not in types:
                types[t.name] = TensorType(t.shape, fallback.get(t.itemsize, TensorProto.FLOAT))
    return types
