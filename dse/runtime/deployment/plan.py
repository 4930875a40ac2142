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
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np

from dse.config import ITERATIONS, WARMUP
from dse.errors import DseError
from dse.records import Items, Range, Tag, Text, key, read, to_json

PLAN_VERSION = 3
PLAN = "plan.json"
#: The whole model's outputs on the plan's input (``numpy.savez``: ``o0``, ``o1``... in the
#: order of the plan's outputs), written beside the plan at deployment.
EXPECTED = "expected.npz"
#: Largest plan.json read (a plan that splits every layer of a large network is a few MB).
MAX_PLAN_BYTES = 64 * 2**20
#: What the reader tells a user whose plan is wrong.
FIX = "deploy the mapping again"
MAX_RANK_DIMS = 16

#: Element types a tensor of the plan may have (numpy names).
DType = Literal[
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
]  # fmt: skip
Name = Annotated[str, Text(4096)]
Short = Annotated[str, Text(255)]
Count = Annotated[int, Range(0)]  # a rank, a tag, an index
Dim = Annotated[int, Range(0, 2**40)]
Shape = Annotated[tuple[Dim, ...], Items(MAX_RANK_DIMS)]
Many = Annotated[int, Range(0, 10**9)]


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and numpy element type."""

    shape: Shape
    dtype: DType

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Port:
    """A graph input, on the entry rank."""

    name: Name
    shape: Shape
    dtype: DType

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)


@dataclass(frozen=True)
class Output(Port):
    """A graph output, made on ``rank``."""

    rank: Count


@dataclass(frozen=True)
class WireTensor:
    """A tensor that crosses ranks: its shape, type and message tag."""

    shape: Shape
    dtype: DType
    tag: Count

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)


@dataclass
class Run:
    """Run one sub-model (``segment``) on local tensors."""

    op: ClassVar[str] = "run"
    segment: Short
    inputs: list[Name]
    outputs: list[Name]
    layers: list[Count]  # the graph layers (or their parts) it computes
    free: list[Name] = field(default_factory=list)


@dataclass
class Send:
    """Post a non-blocking send of a local tensor to rank ``to``."""

    op: ClassVar[str] = "send"
    tensor: Name
    to: Count
    tag: Count
    free: list[Name] = field(default_factory=list)


@dataclass
class Recv:
    """Receive a tensor from rank ``source`` (``"from"`` in JSON) into its buffer."""

    op: ClassVar[str] = "recv"
    tensor: Name
    source: Count = field(metadata=key("from"))
    tag: Count
    free: list[Name] = field(default_factory=list)


@dataclass(frozen=True)
class Part:
    """One part of a gathered tensor: its ``range`` along the gather's axis (channels, or rows:
    axis 2), made by rank ``source``; a part without a ``tag`` is the gathering rank's own."""

    tensor: Name
    source: Count = field(metadata=key("from"))
    range: tuple[Dim, Dim]
    tag: Count | None = None


@dataclass
class Gather:
    """Receive a split layer's parts into their ranges of the whole tensor's buffer."""

    op: ClassVar[str] = "gather"
    tensor: Name
    shape: Shape
    dtype: DType
    axis: Annotated[int, Range(0, MAX_RANK_DIMS)]
    parts: list[Part]
    free: list[Name] = field(default_factory=list)

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)


#: A rank's step; in JSON an object with its ``"op"``.
Step = Annotated[Run | Send | Recv | Gather, Tag("op")]


def step_json(step: Run | Send | Recv | Gather) -> dict[str, Any]:
    """One step's JSON form, its ``"op"`` first."""
    return to_json(step, Step)


@dataclass
class RankPlan:
    """One rank: the device it runs on, its sub-models and its steps in order."""

    rank: Count
    device: Short
    device_index: Count
    host: Short
    kind: Literal["cpu", "gpu"]
    threads: Annotated[int, Range(1, 4096)]
    # the device's memory (MB): its rank's buffers are bounded by it
    memory_mb: Annotated[float, Range(0, 2**50, lo_open=True)]
    segments: list[Name]
    steps: list[Step]


@dataclass(frozen=True)
class Reference:
    """The whole model (``path``, for the speed probe) and its outputs on the plan's input
    (``expected``: a file of the deployment directory, the equivalence check's reference)."""

    path: Name
    # the net's input shape override, as the net config gave it
    input_shape: list[Any] | dict[str, Any] | str | int | None = None
    expected: Short = EXPECTED


@dataclass(frozen=True)
class RunSettings:
    """Iterations a run of the deployment makes unless its command line says otherwise."""

    warmup: Many = WARMUP
    iterations: Annotated[int, Range(1, 10**9)] = ITERATIONS
    stream: Many = 0


@dataclass
class Plan:
    """Who runs, sends and receives what, in order; see the module docstring for its JSON."""

    version: int = field(default=PLAN_VERSION, kw_only=True)
    net: Short
    fingerprint: Short
    mapping_hash: Short
    platform: Short
    seed: Annotated[int, Range(0)]
    inputs: list[Port]
    outputs: list[Output]
    entry_rank: Count
    tensors: dict[Name, WireTensor]
    ranks: list[RankPlan]
    reference: Reference | None = None
    run: RunSettings | None = None
    command: Annotated[str, Text(65536)] | None = None

    def to_json(self) -> dict[str, Any]:
        """The plan's JSON form (``plan.json``)."""
        return to_json(self)

    def dumps(self) -> str:
        """The text of ``plan.json``."""
        return json.dumps(self.to_json(), indent=1)

    @staticmethod
    def from_json(doc: Any, where: str = PLAN) -> Plan:
        """The plan of a parsed ``plan.json``; one line naming the field where it is wrong."""
        if isinstance(doc, dict) and "version" not in doc:
            raise DseError(f"{where}: 'version' is missing ({FIX})")
        version = doc.get("version") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and version != PLAN_VERSION:
            raise DseError(
                f"{where}: plan version {json.dumps(version)[:20]}, this dse runs "
                f"version {PLAN_VERSION}: deploy the mapping again with python -m dse.deploy"
            )
        return read(Plan, doc, where, FIX)


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
