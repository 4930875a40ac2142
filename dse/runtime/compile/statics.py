"""Static tensors of a net (weights, Constant-node outputs, folded shape tensors) for sub-models.

A weight stays where its bytes are (memory-mapped, :mod:`dse.runtime.weights`) until a
sub-model is written: a :class:`Blob` names it and the cuts a part takes of it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dse.errors import DseError
from dse.net import Net
from dse.net.onnx_load import TensorType, fold_constants, infer_types
from dse.runtime.weights import MappedFiles

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
            raise DseError(
                f"static tensor '{name}' of net '{self.net.name}' cannot be evaluated for the "
                "sub-models: export the model with constant-folded shape computations"
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
