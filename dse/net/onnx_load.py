"""Read an ONNX file without its weights, fix dynamic input shapes, infer tensor shapes."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeGuard

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, NodeProto, TensorProto

from dse.errors import DseError
from dse.net.measure import measure_shapes

InputShape = Sequence[int] | Mapping[str, Sequence[int]] | None

#: Largest dimension a tensor may have (onnxruntime and most kernels index with int32).
MAX_DIM = 2**31 - 1
#: Largest ONNX file read whole (protobuf's limit; larger models keep weights as external data).
MAX_MODEL_BYTES = 2**31


@dataclass(frozen=True)
class Budget:
    """What measuring shapes by running the model may take (``net.measure_mb``,
    ``net.measure_seconds``): address space beyond the weights, and wall-clock time."""

    memory_mb: float = 4096.0
    seconds: float = 60.0


@dataclass(frozen=True)
class TensorType:
    """Static shape and element type of one tensor."""

    shape: tuple[int, ...]
    elem_type: int

    @property
    def itemsize(self) -> int:
        return elem_size(self.elem_type)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


def elem_size(elem_type: int) -> int:
    """Bytes per element of an ONNX tensor element type (0 for strings and undefined)."""
    if elem_type in (TensorProto.UNDEFINED, TensorProto.STRING):
        return 0
    if elem_type in (TensorProto.INT4, TensorProto.UINT4):
        return 1  # packed nibbles; count a byte to stay conservative
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize


def read_model(path: str | Path) -> ModelProto:
    """Parse an ONNX file's graph, leaving external weight data on disk."""
    p = Path(path).expanduser()
    try:
        exists, is_dir, is_file = p.exists(), p.is_dir(), p.is_file()
        size = p.stat().st_size if is_file else 0
    except (OSError, RuntimeError) as exc:  # symlink loops, permissions, names too long
        raise DseError(
            f"cannot read ONNX file {p}: {exc.__class__.__name__} (check net.path)"
        ) from None
    if not exists:
        raise DseError(f"ONNX file not found: {p} (check net.path)")
    if is_dir:
        raise DseError(f"{p} is a directory, not an ONNX file (set net.path to the .onnx file)")
    if not is_file:
        raise DseError(f"{p} is not a regular file (a device or pipe): set net.path to the file")
    if size > MAX_MODEL_BYTES:
        raise DseError(
            f"{p} is {size / 2**30:.1f} GiB: an ONNX file over 2 GiB must keep its weights "
            "as external data (onnx.save_model(..., save_as_external_data=True))"
        )
    try:
        model = onnx.load(str(p), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError, OSError, RecursionError) as exc:
        raise DseError(
            f"{p} is not an ONNX model ({exc.__class__.__name__}): "
            "pass a .onnx file exported by your framework"
        ) from None
    if model.ir_version == 0 and not model.HasField("graph"):
        raise DseError(
            f"{p} is not an ONNX model (no graph found): "
            "pass a .onnx file exported by your framework"
        )
    if not model.graph.node:
        raise DseError(f"ONNX model {p} has no nodes: export the network with its layers")
    for t in model.graph.initializer:
        _check_initializer(t, p)
        if t.data_location == TensorProto.EXTERNAL:
            external_location(t, p.parent, p, data=False)
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                _check_initializer(a.t, p)
    return model


def external_location(
    t: TensorProto, base: Path, model: Path | str | None = None, data: bool = True
) -> tuple[Path, int, int]:
    """(file, offset, length) of a weight stored as external data, checked: the file lies
    inside ``base`` (the model's folder: not absolute, not through ``..`` or a symlink out),
    offset and length are whole numbers agreeing with the weight's shape, and (``data``) the
    file holds those bytes. One line otherwise: a model cannot name bytes it does not have, nor
    read others'. Reading the graph alone (``data=False``) does not need the file."""
    info = {e.key: e.value for e in t.external_data}
    where = f"weight '{t.name}'" if model is None else f"ONNX model {model}: weight '{t.name}'"
    loc = info.get("location", "")
    root = Path(base).resolve()
    path = Path(base) / loc
    if not loc or Path(loc).is_absolute() or not path.resolve().is_relative_to(root):
        raise DseError(
            f"{where} is stored at {loc!r}, outside the model's folder {root}: keep a model's "
            "external data beside it"
        )
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
    except ValueError:
        raise DseError(f"{where} has a non-numeric offset or length: re-export the model") from None
    itemsize = elem_size(t.data_type)
    declared = math.prod(t.dims) * itemsize if itemsize else -1
    if t.data_type in (TensorProto.INT4, TensorProto.UINT4):
        declared = (math.prod(t.dims) + 1) // 2
    if offset < 0 or (length >= 0 and declared >= 0 and length != declared):
        raise DseError(
            f"{where} declares {declared} bytes but its external data entry says offset "
            f"{offset}, length {length}: the file is damaged or was not written by an exporter"
        )
    need = length if length >= 0 else max(declared, 0)
    if not data:
        return path, offset, need
    try:
        size = path.stat().st_size if path.is_file() else -1
    except OSError:
        size = -1
    if size < 0:
        raise DseError(f"{where} is stored in {loc!r}, which is missing: copy it beside the model")
    if offset + need > size:
        raise DseError(
            f"{where} needs bytes {offset}-{offset + need} of {loc!r}, which holds {size}: "
            "the weights file is truncated or belongs to another model"
        )
    return path, offset, need


#: Where each tensor's external data starts: a page boundary, so it can be mapped.
EXTERNAL_ALIGN = 4096


def point_external(t: TensorProto, location: str, offset: int, length: int) -> None:
    """Make ``t`` read its data from ``length`` bytes at ``offset`` of the file ``location``
    (beside the model; :func:`external_location` reads it back) instead of holding it."""
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value


def append_external(data: BinaryIO, t: TensorProto, arr: np.ndarray) -> None:
    """Write ``arr`` to the open data file ``data`` at the next :data:`EXTERNAL_ALIGN`
    boundary (zeros between) and point ``t`` at it (:func:`point_external`)."""
    pad = (-data.tell()) % EXTERNAL_ALIGN
    data.write(b"\0" * pad)
    offset = data.tell()
    data.write(np.ascontiguousarray(arr).data.cast("B"))
    point_external(t, Path(data.name).name, offset, arr.nbytes)


def _check_initializer(t: TensorProto, path: Path) -> None:
    """One line for a weight whose declared shape is impossible or disagrees with its data."""
    dims = list(t.dims)
    if any(d < 0 or d > MAX_DIM for d in dims):
        raise DseError(f"ONNX model {path}: weight '{t.name}' has impossible shape {dims}")
    if t.data_location == TensorProto.EXTERNAL or t.data_type in (
        TensorProto.STRING,
        TensorProto.UNDEFINED,
        TensorProto.INT4,
        TensorProto.UINT4,
    ):
        return
    numel = math.prod(dims)
    if t.raw_data:
        try:
            itemsize = elem_size(t.data_type)
        except (KeyError, TypeError, ValueError):  # an element type numpy does not know
            return
        held = len(t.raw_data) // itemsize if itemsize else numel
    else:
        fields = (t.float_data, t.int32_data, t.int64_data, t.double_data, t.uint64_data)
        held = sum(len(f) for f in fields)
        if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
            held //= 2
    if held != numel:
        raise DseError(
            f"ONNX model {path}: weight '{t.name}' declares shape {dims} ({numel} values) but "
            f"holds {held}: the file is damaged or was not written by an exporter"
        )


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str] | None:
    """Dimensions of a tensor value info: ints where static, names or '?' where dynamic."""
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims: list[int | str] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        else:
            dims.append(d.dim_param or "?")
    return dims


def graph_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    """The model's real inputs (old exporters also list initializers as inputs)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def fix_input_shapes(model: ModelProto, input_shape: object) -> None:
    """Give every real input a fully static shape, in place.

    ``input_shape`` is one shape (for a model with one input, or applied to the single input
    that has dynamic dimensions) or a mapping from input name to shape (:data:`InputShape`),
    as the config gave it: anything else is one line.
    """
    inputs = graph_inputs(model)
    by_name: dict[str, list[int]] = {}
    if isinstance(input_shape, Mapping):
        unknown = sorted(set(map(str, input_shape)) - {i.name for i in inputs})
        if unknown:
            names = ", ".join(i.name for i in inputs)
            raise DseError(
                f"net.input_shape names unknown input '{unknown[0]}': "
                f"the model's inputs are {names}"
            )
        by_name = {str(k): check_shape(v, f"net.input_shape.{k}") for k, v in input_shape.items()}
    elif input_shape is not None:
        input_shape = check_shape(input_shape, "net.input_shape")
        dynamic = [i for i in inputs if not _is_static(_dims(i))]
        targets = dynamic or inputs
        if len(targets) > 1:
            names = ", ".join(i.name for i in targets)
            raise DseError(
                f"net.input_shape is one shape but the model has several inputs "
                f"({names}): give a mapping, e.g. net.input_shape={{{targets[0].name}:"
                f"[...]}}"
            )
        by_name = {targets[0].name: list(input_shape)}

    for vi in inputs:
        dims = _dims(vi)
        given = by_name.get(vi.name)
        if given is None:
            if not _is_static(dims):
                raise DseError(_needs_shape_message(vi.name, dims))
            continue
        if dims is not None and len(dims) != len(given):
            raise DseError(
                f"net.input_shape {given} has rank {len(given)} but input "
                f"'{vi.name}' has rank {len(dims)} ({_fmt(dims)})"
            )
        if dims is not None:
            for d, g in zip(dims, given, strict=True):
                if isinstance(d, int) and d != g:
                    raise DseError(
                        f"net.input_shape {given} conflicts with input '{vi.name}' "
                        f"of fixed shape {_fmt(dims)}"
                    )
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for g in given:
            shape.dim.add().dim_value = g


def check_shape(value: object, key: str) -> list[int]:
    """A shape given in the config: a list of whole numbers from 1 to 2^31 - 1."""
    example = f"e.g. {key}=[1,3,224,224]"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise DseError(f"{key} must be a list of dimensions, {example}, not {value!r}")
    shape = []
    for d in value:
        if isinstance(d, bool) or not isinstance(d, int):
            raise DseError(f"{key} {list(value)!r} must hold whole numbers only, {example}")
        if not 1 <= d <= MAX_DIM:
            raise DseError(f"{key} {list(value)}: every dimension must be from 1 to 2^31 - 1")
        shape.append(d)
    return shape


def _is_static(dims: list[int | str] | None) -> TypeGuard[list[int]]:
    return dims is not None and all(isinstance(d, int) for d in dims)


def _fmt(dims: Iterable[int | str] | None) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]" if dims is not None else "[unknown]"


def _needs_shape_message(name: str, dims: list[int | str] | None) -> str:
    if dims is None:
        return (
            f"input '{name}' has no shape in the model: set net.input_shape, "
            f"e.g. net.input_shape=[1,3,224,224]"
        )
    example = ",".join(
        str(d) if isinstance(d, int) else ("1" if i == 0 else "224") for i, d in enumerate(dims)
    )
    return (
        f"input '{name}' has dynamic shape {_fmt(dims)}: set net.input_shape, "
        f"e.g. net.input_shape=[{example}]"
    )


def infer_types(model: ModelProto) -> dict[str, TensorType | None]:
    """ONNX shape inference over the graph.

    Returns every named tensor's type; ``None`` where the shape is not fully static. Without
    ONNX's data propagation: it takes time in the size of every 1-D tensor a Slice reads (a
    Tile to 1e9 elements then a Slice hangs it); shape computations are folded instead
    (:func:`fold_constants`, sizes checked before evaluating).
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(
            model, check_type=False, strict_mode=False, data_prop=False
        )
    except Exception:  # noqa: BLE001 - fall back to what the model itself declares
        inferred = model
    g = inferred.graph
    types: dict[str, TensorType | None] = {}
    for t in g.initializer:
        types[t.name] = TensorType(tuple(int(d) for d in t.dims), t.data_type)
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.name in types and types[vi.name] is not None:
            continue
        dims = _dims(vi)
        elem = vi.type.tensor_type.elem_type
        if _is_static(dims) and vi.type.HasField("tensor_type"):
            types[vi.name] = TensorType(tuple(dims), elem)
        else:
            types[vi.name] = None
    return types


def run_for_types(
    model: ModelProto,
    base_dir: Path | None,
    names: Sequence[str],
    budget: Budget | None = None,
) -> dict[str, TensorType]:
    """Measure tensor shapes by running the model once in onnxruntime on zero inputs.

    The fallback where static inference cannot see through the graph (custom ops, computed
    resize scales, data-dependent shapes). Needs the weights, so ``base_dir`` is where the
    model's external data lives. The run is a child process within ``budget`` (memory and
    time, :mod:`dse.net.measure`): ``MemoryError`` or ``TimeoutError`` when it is exceeded.
    """
    budget = budget or Budget()
    m = ModelProto()
    m.CopyFrom(model)
    # onnxruntime lags onnx in the IR versions it accepts; IR 10 covers opsets up to 21
    m.ir_version = min(m.ir_version, 10)
    # declared sizes (checked against their data or the limits when the file was read)
    # of the weights some node reads (an unused one, however large it says it is, lifts nothing)
    read = _read_names(m.graph)
    weight_bytes = sum(
        external_location(t, base_dir)[2]
        if t.data_location == TensorProto.EXTERNAL and base_dir is not None
        else math.prod(t.dims) * elem_size(t.data_type)
        for t in m.graph.initializer
        if t.name in read and t.data_type not in (TensorProto.STRING, TensorProto.UNDEFINED)
    )
    existing = {o.name for o in m.graph.output}
    for n in names:
        if n not in existing:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    inputs = {
        vi.name: (
            [d.dim_value for d in vi.type.tensor_type.shape.dim],
            vi.type.tensor_type.elem_type,
        )
        for vi in graph_inputs(m)
    }
    with tempfile.TemporaryDirectory() as tmp:
        # the graph only: external weights are read by the child, inside its budget
        path = Path(tmp) / "graph.onnx"
        path.write_bytes(m.SerializeToString())
        del m
        memory = int(budget.memory_mb * 2**20) + 3 * weight_bytes
        shapes = measure_shapes(path, base_dir, inputs, list(names), memory, budget.seconds)
    return {k: TensorType(shape, elem) for k, (shape, elem) in shapes.items()}


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node of ``graph`` or of its subgraphs reads."""
    names: set[str] = set()
    for n in graph.node:
        names.update(n.input)
        for a in n.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                names |= _read_names(g)
    return names


#: Largest tensor (elements) the folder evaluates; shape computations are far smaller.
FOLD_LIMIT = 1 << 20


def fold_constants(model: ModelProto, types: Mapping[str, TensorType | None]) -> ModelProto:
    """Evaluate shape-computation subgraphs and replace them by initializers.

    ``Shape``/``Size`` take their values from the inferred ``types``; other nodes whose inputs
    are all known (small initializers with data, or values folded before) run in ONNX's
    reference evaluator. Returns a new model; what cannot be evaluated is left as it was.
    """
    from onnx.reference import ReferenceEvaluator  # slow to import: only when a fold is needed

    opsets = {o.domain or "": o.version for o in model.opset_import}
    values: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if (
            t.data_location != TensorProto.EXTERNAL
            and math.prod(t.dims) <= FOLD_LIMIT
            and (t.raw_data or _has_typed_data(t) or math.prod(t.dims) == 0)
        ):
            values[t.name] = onnx.numpy_helper.to_array(t)
    folded: list[NodeProto] = []
    for node in model.graph.node:
        outs = _fold_node(node, values, types, opsets, ReferenceEvaluator)
        if outs is None:
            continue
        values.update(outs)
        folded.append(node)
    if not folded:
        return model
    out = ModelProto()
    out.CopyFrom(model)
    gone = {id(n) for n in folded}
    keep = [n for n in model.graph.node if id(n) not in gone]
    used = {t for n in keep for t in n.input} | {o.name for o in model.graph.output}
    produced = {t for n in folded for t in n.output}
    out.graph.ClearField("node")
    out.graph.node.extend(keep)
    for name in sorted(produced & used):
        out.graph.initializer.append(onnx.numpy_helper.from_array(values[name], name))
    return out


def unfolded_root(model: ModelProto, name: str, known: Collection[str]) -> NodeProto:
    """The node where the folding of static tensor ``name`` stops: walking up from its
    producer, the first node none of whose inputs is an unfolded static tensor (each input
    ``known``: folded, an initializer or an activation; or a graph input)."""
    producer = {t: n for n in model.graph.node for t in n.output if t}
    if name not in producer:  # no node makes it (a graph input taken for a static tensor)
        return onnx.helper.make_node("Identity", [name], [name], name=name)
    node = producer[name]
    seen = {name}
    while True:
        up = [t for t in node.input if t and t not in known and t in producer and t not in seen]
        if not up:
            return node
        seen.add(up[0])
        node = producer[up[0]]


def _outputs_small(
    node: NodeProto,
    values: Mapping[str, np.ndarray],
    types: Mapping[str, TensorType | None],
    opsets: Mapping[str, int],
) -> bool:
    """Whether every output of ``node`` is known, before evaluating it, to have at most
    :data:`FOLD_LIMIT` elements: from the model's inferred types, else from ONNX's inference of
    this one node on its input values. An output of unknown size is not small."""
    unknown = []
    for t in node.output:
        if not t:
            continue
        tt = types.get(t)
        if tt is None:
            unknown.append(t)
        elif math.prod(tt.shape) > FOLD_LIMIT:
            return False
    if not unknown:
        return True
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(node.domain or "", 1), node.domain)
        arrays = {t: values[t] for t in node.input if t}
        in_types = {
            t: onnx.helper.make_tensor_type_proto(
                onnx.helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)
            )
            for t, a in arrays.items()
        }
        data = {t: onnx.numpy_helper.from_array(a, t) for t, a in arrays.items()}
        out = onnx.shape_inference.infer_node_outputs(schema, node, in_types, data)
    except Exception:  # noqa: BLE001 - no schema or inference failed: size unknown
        return False
    for t in unknown:
        tp = out.get(t)
        if tp is None or not tp.tensor_type.HasField("shape"):
            return False
        dims = tp.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims):
            return False
        if math.prod(d.dim_value for d in dims) > FOLD_LIMIT:
            return False
    return True


def _has_typed_data(t: TensorProto) -> bool:
    return bool(t.float_data or t.int64_data or t.int32_data or t.double_data or t.uint64_data)


def _fold_node(
    node: NodeProto,
    values: dict[str, np.ndarray],
    types: Mapping[str, TensorType | None],
    opsets: dict[str, int],
    evaluator: type,
) -> dict[str, np.ndarray] | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Shape", "Size"):
        # the shape of a value folded before (anchors made from constants), else the inferred
        tt = types.get(node.input[0])
        if node.input[0] in values:
            dims: tuple[int, ...] = tuple(values[node.input[0]].shape)
        elif tt is not None:
            dims = tuple(tt.shape)
        else:
            return None
        shape = np.array(dims, dtype=np.int64)
        if node.op_type == "Size":
            return {node.output[0]: np.array(math.prod(dims), dtype=np.int64)}
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return {node.output[0]: shape[start:end]}
    ins = [t for t in node.input if t]
    if node.op_type in ("If", "Loop", "Scan") or not all(t in values for t in ins):
        return None
    if not _outputs_small(node, values, types, opsets):
        return None  # ConstantOfShape to [3, 1e9] and the like: never evaluate
    try:
        sess = evaluator(node, opsets=opsets)
        results = sess.run(None, {t: values[t] for t in ins})
    except Exception:  # noqa: BLE001 - an op the reference evaluator cannot run stays a node
        return None
    outs = {}
    for name, val in zip(node.output, results, strict=False):
        arr = np.asarray(val)
        if arr.size > FOLD_LIMIT or arr.dtype == object:
            return None
        outs[name] = arr
    return outs
