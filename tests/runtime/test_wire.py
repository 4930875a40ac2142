"""The messages of a served deployment (dse.runtime.deployment.wire): arrays round-trip by
their bytes, and anything else (a pickle, an object array, bytes that do not fit the shape) is
refused with one line naming it."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from dse.runtime.deployment.wire import WireError, decode, encode


def as_sent(parts: list) -> list[bytes]:
    """The parts as ZeroMQ delivers them: bytes."""
    return [bytes(p) for p in parts]


def test_arrays_round_trip_by_their_bytes() -> None:
    arrays = {
        "x": np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4),
        "mask": np.array([[True, False]]),
        "half": np.array([1.5, -2.0], np.float16),
        "empty": np.zeros((0, 3), np.int64),
        "strided": np.arange(10, dtype=np.int32)[::2],  # not contiguous: sent as a copy
        "scalar": np.array(2.5, np.float32),  # no dimension: it keeps none
    }
    header, got = decode(as_sent(encode({"kind": "frame", "id": 7}, arrays)))
    assert header["kind"] == "frame" and header["id"] == 7
    assert list(got) == list(arrays)
    for name, a in arrays.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
        assert np.array_equal(got[name], a)
    assert header["arrays"][0] == {"name": "x", "dtype": "float32", "shape": [1, 2, 3, 4]}


def test_a_message_without_arrays_is_its_header() -> None:
    assert decode(as_sent(encode({"kind": "stop"}))) == ({"kind": "stop"}, {})


def header(**arrays: object) -> bytes:
    return json.dumps({"kind": "frame", "id": 0, **arrays}).encode()


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "an empty message"),
        ([pickle.dumps({"kind": "frame"})], "a header that is not JSON"),
        ([b'{"kind": "exec"}'], "a header without a known kind"),
        ([b"[1, 2]"], "a header without a known kind"),
        ([header(arrays=[]), b"1234"], "1 array parts for 0 described"),
        ([header(arrays=5), b"1234"], "arrays described by a int, not a list"),
        ([b"[" * 100_000], "a header that is not JSON"),
        (
            [header(arrays=[{"name": "x", "dtype": "object", "shape": [1]}]), b"12345678"],
            "an array with name 'x' and element type 'object'",
        ),
        (
            [header(arrays=[{"name": "x", "dtype": "float32", "shape": [2, 2]}]), b"1234"],
            "array 'x' has 4 bytes, not the 16 of float32 (2, 2)",
        ),
        (
            [header(arrays=[{"name": "x", "dtype": "float32", "shape": [-1]}]), b"1234"],
            "array 'x' has shape [-1]",
        ),
        (
            [header(arrays=[{"name": "x", "dtype": "uint8", "shape": [1] * 17}]), b"1"],
            f"array 'x' has shape {[1] * 17}",
        ),
        (
            [header(arrays=[{"name": "x", "dtype": "uint8", "shape": "4"}]), b"1234"],
            "array 'x' has shape '4'",
        ),
    ],
)
def test_what_is_not_a_message_is_refused_naming_it(parts: list, message: str) -> None:
    with pytest.raises(WireError) as err:
        decode(parts)
    assert str(err.value).startswith(message), err.value
