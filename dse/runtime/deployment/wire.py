"""Messages between a served deployment's ranks and the application's side
(:mod:`dse.serve`), over ZeroMQ: what both sides agree on.

A message is a ZeroMQ multipart message: a JSON header, then one part per array holding its raw
bytes (C order). The header says what the message is (``kind``) and, for each array, its
``name``, ``dtype`` (a numpy name of :data:`~dse.runtime.deployment.plan.DTYPES`) and
``shape``. Nothing is pickled: a message can only ever become plain JSON values and numpy
arrays of those element types, checked against their bytes (:func:`decode`).

Kinds, application -> entry rank (the requests socket, PUSH -> PULL):

``frame``  ``{"kind", "id", "arrays"}``: the graph inputs of one inference;
``stop``   ``{"kind"}``: finish the frames in flight, then end.

Ranks -> application (the results socket, PUSH -> PULL):

``ready``    ``{"kind", "rank", "hostname"}``: the rank has loaded its sub-models;
``alive``    ``{"kind", "rank"}``: sent every :data:`BEAT_S` while the rank lives;
``outputs``  ``{"kind", "rank", "id", "arrays"}``: the graph outputs this rank holds, of
             frame ``id``;
``timing``   ``{"kind", "rank", "id", "compute"}``: the seconds this rank's sub-models ran on
             frame ``id`` (every rank, every frame: what re-planning compares with the
             model's prediction, :mod:`dse.serve.monitor`);
``error``    ``{"kind", "rank", "message"}``: the rank failed (it then ends).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.runtime.deployment.plan import DTYPES

#: How often a served rank says it is alive (s).
BEAT_S = 0.25
#: The largest header read (a header lists names, types and shapes only).
MAX_HEADER_BYTES = 1 << 20
MAX_DIMS = 16
KINDS = frozenset({"frame", "stop", "ready", "alive", "outputs", "timing", "error"})


class WireError(DseError):
    """A message that is not one of :mod:`dse.runtime.deployment.wire`'s."""


def encode(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> list:
    """A message: ``header`` (with ``arrays`` described under ``"arrays"``) and each array's
    bytes (a C-contiguous view where the array already is one: no copy)."""
    described, parts = [], []
    for name, given in (arrays or {}).items():
        a = np.ascontiguousarray(given)  # at least one dimension: a scalar keeps its own
        described.append({"name": name, "dtype": a.dtype.name, "shape": list(np.shape(given))})
        parts.append(a.data.cast("B") if a.size else b"")
    head = dict(header)
    if arrays is not None:
        head["arrays"] = described
    return [json.dumps(head).encode(), *parts]


def decode(parts: Sequence[Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A message's header and arrays (read-only views of its parts), or :class:`WireError`
    naming what is wrong."""
    if not parts:
        raise WireError("an empty message")
    raw = bytes(memoryview(parts[0]))
    if len(raw) > MAX_HEADER_BYTES:
        raise WireError(f"a header of {len(raw)} bytes (at most {MAX_HEADER_BYTES})")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"a header that is not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("kind") not in KINDS:
        raise WireError("a header without a known kind")
    described = header.get("arrays", [])
    if not isinstance(described, list):
        raise WireError(f"arrays described by a {type(described).__name__}, not a list")
    if len(described) != len(parts) - 1:
        raise WireError(f"{len(parts) - 1} array parts for {len(described)} described")
    arrays = {}
    for spec, part in zip(described, parts[1:], strict=True):
        name, dtype, shape = _array_spec(spec)
        data = memoryview(part)
        count = math.prod(shape)
        if data.nbytes != count * dtype.itemsize:
            raise WireError(
                f"array '{name}' has {data.nbytes} bytes, not the {count * dtype.itemsize} "
                f"of {dtype.name} {shape}"
            )
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count).reshape(shape)
    return header, arrays


def _array_spec(spec: object) -> tuple[str, np.dtype, tuple[int, ...]]:
    if not isinstance(spec, dict):
        raise WireError("an array described by something other than an object")
    name, dtype, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
    if not isinstance(name, str) or dtype not in DTYPES:
        raise WireError(f"an array with name {name!r} and element type {dtype!r}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise WireError(f"array '{name}' has shape {shape!r}")
    if not all(isinstance(d, int) and 0 <= d < 2**40 for d in shape):
        raise WireError(f"array '{name}' has shape {shape!r}")
    return name, np.dtype(dtype), tuple(shape)
