"""The plan of a deployment: what each rank receives, runs and sends, in order (``plan.json``).

The types here are the plan; :meth:`Plan.to_json` is its one JSON form, written once by
:func:`dse.runtime.package.write_deployment`, and :func:`dse.runtime.reader.read_plan` its
one reader, which checks the file (:meth:`Plan.from_json`: the schema, every field named where
it is wrong; then the rules of :mod:`dse.runtime.validate`) before a rank allocates anything.

Format (version 3)::

    {"version": 3, "net", "fingerprint", "mapping_hash", "platform", "seed",
     "inputs":  [{"name", "shape", "dtype"}],            # on the entry rank
     "outputs": [{"name", "rank", "shape", "dtype"}],    # the graph outputs and their rank
     "entry_rank",
     "tensors": {name: {"shape", "dtype", "tag"}},       # every tensor that crosses ranks
     "ranks": [{"rank", "device", "device_index", "host", "kind", "threads", "memory_mb",
                "segments": [file], "steps": [step]}],
     "reference": {"path", "input_shape", "expected"},   # the whole model and its outputs
     "run": {"warmup", "iterations", "stream"}, "command"}

A step is ``{"op": "run", "segment", "inputs", "outputs", "layers"}``, ``{"op": "send",
"tensor", "to", "tag"}``, ``{"op": "recv", "tensor", "from", "tag"}`` or ``{"op": "gather",
"tensor", "shape", "dtype", "axis", "parts": [{"tensor", "from", "range"[, "tag"]}]}`` (a part
without a tag is the rank's own; ``"axis"`` 2 gathers bands of rows), each with an optional
``"free"``: the local tensors last used there; a run's ``"layers"`` may be empty (it only cuts
rows of a tensor to send them). Version 3 added ``memory_mb`` (a rank's device memory: its
buffers' bound) and ``reference.expected`` (the whole model's outputs, stored in the deployment
directory).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dse.config import ITERATIONS, WARMUP
from dse.errors import DseError

PLAN_VERSION = 3
PLAN = "plan.json"
#: The whole model's outputs on the plan's input (``numpy.savez``: ``o0``, ``o1``... in the
#: order of the plan's outputs), written beside the plan at deployment.
EXPECTED = "expected.npz"
#: Largest plan.json read (a DenseNet-121 plan that splits every layer is a few MB).
MAX_PLAN_BYTES = 64 * 2**20
#: Element types a tensor of the plan may have (numpy names).
DTYPES = frozenset(
    {
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    }
)
MAX_RANK_DIMS = 16
MAX_INT = 2**53  # JSON integers beyond this are not exact anywhere


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and numpy element type."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class Port:
    """A graph input (on the entry rank) or output (on ``rank``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    rank: int | None = None

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.rank is not None:
            out["rank"] = self.rank
        return out | {"shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class WireTensor:
    """A tensor that crosses ranks: its shape, type and message tag."""

    shape: tuple[int, ...]
    dtype: str
    tag: int

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "tag": self.tag}


@dataclass
class Run:
    """Run one sub-model (``segment``) on local tensors."""

    op: ClassVar[str] = "run"
    segment: str
    inputs: list[str]
    outputs: list[str]
    layers: list[int]  # the graph layers (or their parts) it computes
    free: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "segment": self.segment, "inputs": list(self.inputs)}
        out |= {"outputs": list(self.outputs), "layers": list(self.layers)}
        return _with_free(out, self.free)


@dataclass
class Send:
    """Post a non-blocking send of a local tensor to rank ``to``."""

    op: ClassVar[str] = "send"
    tensor: str
    to: int
    tag: int
    free: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "tensor": self.tensor, "to": self.to, "tag": self.tag}
        return _with_free(out, self.free)


@dataclass
class Recv:
    """Receive a tensor from rank ``source`` (``"from"`` in JSON) into its buffer."""

    op: ClassVar[str] = "recv"
    tensor: str
    source: int
    tag: int
    free: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "tensor": self.tensor, "from": self.source, "tag": self.tag}
        return _with_free(out, self.free)


@dataclass(frozen=True)
class Part:
    """One part of a gathered tensor: its ``range`` along the gather's axis (channels, or rows:
    axis 2), made by rank ``source``; a part without a ``tag`` is the gathering rank's own."""

    tensor: str
    source: int
    range: tuple[int, int]
    tag: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tensor": self.tensor, "from": self.source}
        out["range"] = list(self.range)
        return out if self.tag is None else out | {"tag": self.tag}


@dataclass
class Gather:
    """Receive a split layer's parts into their ranges of the whole tensor's buffer."""

    op: ClassVar[str] = "gather"
    tensor: str
    shape: tuple[int, ...]
    dtype: str
    axis: int
    parts: list[Part]
    free: list[str] = field(default_factory=list)

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "tensor": self.tensor, "shape": list(self.shape)}
        out |= {"dtype": self.dtype, "axis": self.axis, "parts": [p.to_json() for p in self.parts]}
        return _with_free(out, self.free)


Step = Run | Send | Recv | Gather


def _with_free(out: dict[str, Any], free: list[str]) -> dict[str, Any]:
    return out | {"free": list(free)} if free else out


@dataclass
class RankPlan:
    """One rank: the device it runs on, its sub-models and its steps in order."""

    rank: int
    device: str
    device_index: int
    host: str
    kind: str  # cpu | gpu
    threads: int
    memory_mb: float  # the device's memory (MB): its rank's buffers are bounded by it
    segments: list[str]
    steps: list[Step]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "device": self.device}
        out |= {"device_index": self.device_index, "host": self.host, "kind": self.kind}
        out |= {"threads": self.threads, "memory_mb": self.memory_mb}
        out["segments"] = list(self.segments)
        out["steps"] = [s.to_json() for s in self.steps]
        return out


@dataclass(frozen=True)
class Reference:
    """The whole model (``path``, for the speed probe) and its outputs on the plan's input
    (``expected``: a file of the deployment directory, the equivalence check's reference)."""

    path: str
    input_shape: Any = None  # the net's input shape override, as the net config gave it
    expected: str = EXPECTED

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "input_shape": self.input_shape, "expected": self.expected}


@dataclass(frozen=True)
class RunSettings:
    """Iterations a run of the deployment makes unless its command line says otherwise."""

    warmup: int = WARMUP
    iterations: int = ITERATIONS
    stream: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"warmup": self.warmup, "iterations": self.iterations, "stream": self.stream}


@dataclass
class Plan:
    """Who runs, sends and receives what, in order; see the module docstring for its JSON."""

    net: str
    fingerprint: str
    mapping_hash: str
    platform: str
    seed: int
    inputs: list[Port]
    outputs: list[Port]
    entry_rank: int
    tensors: dict[str, WireTensor]
    ranks: list[RankPlan]
    reference: Reference | None = None
    run: RunSettings | None = None
    command: str | None = None
    version: int = PLAN_VERSION

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "net": self.net}
        out |= {"fingerprint": self.fingerprint, "mapping_hash": self.mapping_hash}
        out |= {"platform": self.platform, "seed": self.seed}
        out["inputs"] = [p.to_json() for p in self.inputs]
        out["outputs"] = [p.to_json() for p in self.outputs]
        out["entry_rank"] = self.entry_rank
        out["tensors"] = {k: v.to_json() for k, v in self.tensors.items()}
        out["ranks"] = [r.to_json() for r in self.ranks]
        if self.reference is not None:
            out["reference"] = self.reference.to_json()
        if self.run is not None:
            out["run"] = self.run.to_json()
        if self.command is not None:
            out["command"] = self.command
        return out

    def dumps(self) -> str:
        """The text of ``plan.json``."""
        return json.dumps(self.to_json(), indent=1)

    @staticmethod
    def from_json(doc: Any, where: str = PLAN) -> Plan:
        """The plan of a parsed ``plan.json``; one line naming the field where it is wrong."""
        return _PlanReader(where).plan(doc)


def input_arrays(plan: Plan, seed: int | None = None) -> dict[str, np.ndarray]:
    """The plan's seeded input image(s) (``seed``: the plan's): :func:`seeded_inputs`."""
    return seeded_inputs(plan.inputs, plan.seed if seed is None else seed)


def seeded_inputs(ports: list[Port], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of ``ports``: standard normal floats (integers: zeros)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in ports:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            out[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
        else:
            out[spec.name] = np.zeros(spec.shape, dtype=dtype)
    return out


class _PlanReader:
    """Builds a :class:`Plan` from parsed JSON, naming the field that is wrong."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, at: str, problem: str) -> DseError:
        return DseError(f"{self.where}: {at}: {problem} (deploy the mapping again)")

    def obj(self, value: Any, at: str, keys: tuple[str, ...] = ()) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(at, f"expected an object, not {_kind(value)}")
        for k in keys:
            if k not in value:
                raise self.fail(at, f"'{k}' is missing")
        return value

    def integer(self, value: Any, at: str, lo: int = 0, hi: int = MAX_INT) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(at, f"expected an integer, not {_kind(value)}")
        if not lo <= value <= hi:
            raise self.fail(at, f"{value} is outside [{lo}, {hi}]")
        return value

    def text(self, value: Any, at: str, limit: int = 4096) -> str:
        if not isinstance(value, str) or not value or len(value) > limit or "\0" in value:
            raise self.fail(at, f"expected a non-empty text of at most {limit} characters")
        return value

    def items(self, value: Any, at: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(at, f"expected a list, not {_kind(value)}")
        return value

    def each(self, value: Any, at: str, read: Callable[[Any, str], Any]) -> list[Any]:
        return [read(v, f"{at}[{i}]") for i, v in enumerate(self.items(value, at))]

    def names(self, value: Any, at: str) -> list[str]:
        return self.each(value, at, self.text)

    def shape(self, value: Any, at: str) -> tuple[int, ...]:
        dims = self.items(value, at)
        if len(dims) > MAX_RANK_DIMS:
            raise self.fail(at, f"{len(dims)} dimensions, more than {MAX_RANK_DIMS}")
        return tuple(self.integer(d, f"{at}[{i}]", 0, 2**40) for i, d in enumerate(dims))

    def dtype(self, value: Any, at: str) -> str:
        if not isinstance(value, str) or value not in DTYPES:
            raise self.fail(at, f"{json.dumps(value)[:40]} is not one of {sorted(DTYPES)}")
        return value

    def port(self, value: Any, at: str, output: bool) -> Port:
        d = self.obj(value, at, ("name", "shape", "dtype", *(("rank",) if output else ())))
        rank = self.integer(d["rank"], f"{at}.rank") if output else None
        shape, dtype = self.shape(d["shape"], f"{at}.shape"), self.dtype(d["dtype"], f"{at}.dtype")
        return Port(self.text(d["name"], f"{at}.name"), shape, dtype, rank)

    def wire(self, value: Any, at: str) -> WireTensor:
        d = self.obj(value, at, ("shape", "dtype", "tag"))
        shape, dtype = self.shape(d["shape"], f"{at}.shape"), self.dtype(d["dtype"], f"{at}.dtype")
        return WireTensor(shape, dtype, self.integer(d["tag"], f"{at}.tag"))

    def step(self, value: Any, at: str) -> Step:
        d = self.obj(value, at, ("op",))
        op = d["op"]
        free = self.names(d.get("free", []), f"{at}.free")
        if op == "run":
            d = self.obj(d, at, ("segment", "inputs", "outputs", "layers"))
            layers = self.each(d["layers"], f"{at}.layers", self.integer)
            inputs, outputs = self.names(d["inputs"], f"{at}.inputs"), d["outputs"]
            segment = self.text(d["segment"], f"{at}.segment", 255)
            return Run(segment, inputs, self.names(outputs, f"{at}.outputs"), layers, free)
        if op in ("send", "recv"):
            peer = "to" if op == "send" else "from"
            d = self.obj(d, at, ("tensor", peer, "tag"))
            tensor, tag = (
                self.text(d["tensor"], f"{at}.tensor"),
                self.integer(d["tag"], f"{at}.tag"),
            )
            other = self.integer(d[peer], f"{at}.{peer}")
            return (
                Send(tensor, other, tag, free) if op == "send" else Recv(tensor, other, tag, free)
            )
        if op == "gather":
            d = self.obj(d, at, ("tensor", "shape", "dtype", "axis", "parts"))
            shape, dtype = (
                self.shape(d["shape"], f"{at}.shape"),
                self.dtype(d["dtype"], f"{at}.dtype"),
            )
            parts = self.each(d["parts"], f"{at}.parts", self.part)
            axis = self.integer(d["axis"], f"{at}.axis", 0, MAX_RANK_DIMS)
            return Gather(self.text(d["tensor"], f"{at}.tensor"), shape, dtype, axis, parts, free)
        raise self.fail(f"{at}.op", f"{json.dumps(op)[:40]} is not run, send, recv or gather")

    def part(self, value: Any, at: str) -> Part:
        d = self.obj(value, at, ("tensor", "from", "range"))
        bounds = self.items(d["range"], f"{at}.range")
        if len(bounds) != 2:
            raise self.fail(f"{at}.range", "expected [first, end]")
        lo, hi = (self.integer(b, f"{at}.range[{i}]", 0, 2**40) for i, b in enumerate(bounds))
        tag = None if "tag" not in d else self.integer(d["tag"], f"{at}.tag")
        return Part(
            self.text(d["tensor"], f"{at}.tensor"),
            self.integer(d["from"], f"{at}.from"),
            (lo, hi),
            tag,
        )

    def rank(self, value: Any, at: str) -> RankPlan:
        keys = ("rank", "device", "device_index", "host", "kind", "threads", "memory_mb")
        d = self.obj(value, at, (*keys, "segments", "steps"))
        memory = d["memory_mb"]
        if (
            isinstance(memory, bool)
            or not isinstance(memory, int | float)
            or not 0 < memory < 2**50
        ):
            raise self.fail(f"{at}.memory_mb", "expected a positive number of MB")
        if d["kind"] not in ("cpu", "gpu"):
            raise self.fail(f"{at}.kind", "expected cpu or gpu")
        return RankPlan(
            self.integer(d["rank"], f"{at}.rank"),
            self.text(d["device"], f"{at}.device", 255),
            self.integer(d["device_index"], f"{at}.device_index"),
            self.text(d["host"], f"{at}.host", 255),
            d["kind"],
            self.integer(d["threads"], f"{at}.threads", 1, 4096),
            float(memory),
            self.names(d["segments"], f"{at}.segments"),
            self.each(d["steps"], f"{at}.steps", self.step),
        )

    def reference(self, value: Any, at: str) -> Reference:
        d = self.obj(value, at, ("path", "expected"))
        shape = d.get("input_shape")
        if not isinstance(shape, list | dict | str | int | type(None)) or isinstance(shape, bool):
            raise self.fail(f"{at}.input_shape", f"unexpected {_kind(shape)}")
        path, expected = self.text(d["path"], f"{at}.path"), d["expected"]
        return Reference(path, shape, self.text(expected, f"{at}.expected", 255))

    def run(self, value: Any, at: str) -> RunSettings:
        d = self.obj(value, at, ("warmup", "iterations"))
        return RunSettings(
            self.integer(d["warmup"], f"{at}.warmup", 0, 10**9),
            self.integer(d["iterations"], f"{at}.iterations", 1, 10**9),
            self.integer(d.get("stream", 0), f"{at}.stream", 0, 10**9),
        )

    def plan(self, doc: Any) -> Plan:
        keys = ("version", "net", "fingerprint", "mapping_hash", "platform", "seed", "inputs")
        d = self.obj(doc, "the plan", (*keys, "outputs", "entry_rank", "tensors", "ranks"))
        if d["version"] != PLAN_VERSION:
            raise DseError(
                f"{self.where}: plan version {json.dumps(d['version'])[:20]}, this dse runs "
                f"version {PLAN_VERSION}: deploy the mapping again with python -m dse.deploy"
            )
        tensors = self.obj(d["tensors"], "tensors")
        command = d.get("command")
        return Plan(
            net=self.text(d["net"], "net", 255),
            fingerprint=self.text(d["fingerprint"], "fingerprint", 255),
            mapping_hash=self.text(d["mapping_hash"], "mapping_hash", 255),
            platform=self.text(d["platform"], "platform", 255),
            seed=self.integer(d["seed"], "seed", 0, 2**63),
            inputs=self.each(d["inputs"], "inputs", lambda v, at: self.port(v, at, False)),
            outputs=self.each(d["outputs"], "outputs", lambda v, at: self.port(v, at, True)),
            entry_rank=self.integer(d["entry_rank"], "entry_rank"),
            tensors={
                self.text(k, "tensors"): self.wire(v, f"tensors.{k}") for k, v in tensors.items()
            },
            ranks=self.each(d["ranks"], "ranks", self.rank),
            reference=None
            if d.get("reference") is None
            else self.reference(d["reference"], "reference"),
            run=None if d.get("run") is None else self.run(d["run"], "run"),
            command=None if command is None else self.text(command, "command", 65536),
        )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "true/false", int: "an integer", float: "a number", str: "text"}.get(
        type(value), "a list" if isinstance(value, list) else "an object"
    )
