"""Hostile coefficients files: one case per class of fault (a wrong container, a number too long,
nesting, a key twice, an absurd value, a fraction where a whole number goes, a short row, a
misspelt key, a broken curve, a file too large), each refused in one line naming the file and
the key; the shipped files, a calibration's file and the manual's table agree with the schema.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from dse.errors import DseError
from dse.paths import CONF_DIR
from models_analytical import coefficients as schema
from models_analytical.coefficients import Memory, TypeCoefficients, load_coefficients
from tests.helpers.hostile import assert_each_one_line, run_all

ROOT = Path(__file__).resolve().parents[2]
GOOD = json.loads((CONF_DIR / "platform" / "localhost.json").read_text())


def edited(path: str, value: object) -> dict:
    """The shipped localhost file with ``path`` (dots; ``...``: removed) set to ``value``."""
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return doc


def e(path: str, value: object) -> str:
    return json.dumps(edited(path, value))


TEXT = json.dumps(GOOD)
FREQ = "3000000000.0"  # the cpu's frequency_hz as json.dumps writes it
SR = "speed_reference"
B, S = "bytes", "seconds"

#: case -> (the file's text, words its one line holds)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    # wrong container types
    "top-level list": ("[1, 2]", ("must be a JSON object",)),
    "layer_s a list": (e("cpu.layer_s", [1e-3]), ("cpu.layer_s: expected an object, not a list",)),
    "regression a string": (e("cpu.regression", "abc"), ("regression: expected an object",)),
    "weights a list": (e("cpu.memory.weights", [1, 1]), ("memory.weights: expected an object",)),
    "links a list": (e("links", [1]), ("links: expected an object, not a list",)),
    "a link a number": (e("links.x", 5), ("links.x: expected an object, not an integer",)),
    "speed_reference text": (e(SR, "fast"), ("speed_reference: expected an object, not text",)),
    "calibrated text": (e("calibrated", "yes"), ("calibrated: expected true or false, not text",)),
    "overhead a list": (e("cpu.layer_overhead_s", [1]), ("layer_overhead_s: expected a number",)),
    # numbers too long for a float, or for Python's parser
    "400 digits": (TEXT.replace(FREQ, "9" * 400), ("frequency_hz: expected a finite number",)),
    "5000 digits": (TEXT.replace(FREQ, "9" * 5000), ("holds an integer of thousands of digits",)),
    # nesting
    "100000 deep": ('{"note": ' + "[" * 100_000 + "]" * 100_000 + "}", ("nested too deeply",)),
    "40 deep note": (e("note", json.loads("[" * 40 + "]" * 40)), ("nested more than 32 deep",)),
    # a key twice
    "cpu twice": (
        TEXT[:-1] + ', "cpu": ' + json.dumps(GOOD["cpu"]) + "}",
        ("key 'cpu' appears twice",),
    ),
    "frequency twice": (
        TEXT.replace(f'"frequency_hz": {FREQ}', '"frequency_hz": 3e9, "frequency_hz": 3e6'),
        ("key 'frequency_hz' appears twice",),
    ),
    # absurd values
    "overhead null": (
        e("cpu.layer_overhead_s", None),
        ("layer_overhead_s: expected a number, not null",),
    ),
    "layer 2.6e301 s": (
        e("cpu.layer_s", {"abc": 2.6e301}),
        ("layer_s.abc: 2.6e+301 is out of range: expected at most 3600 s",),
    ),
    "probe 2.6e301 ms": (
        e(SR, {"whole_ms": {"alexnet": 2.6e301}, "threads": 1}),
        ("whole_ms.alexnet: 2.6e+301 is out of range: expected at most 1e+07 ms",),
    ),
    "probe null": (
        e(SR, {"whole_ms": {"alexnet": None}, "threads": 1}),
        ("whole_ms.alexnet: expected a number, not null",),
    ),
    "a 1 THz cpu": (
        e("cpu.frequency_hz", 1e12),
        ("frequency_hz: 1e+12 is out of range: expected at most 1e+11 Hz",),
    ),  # fmt: skip
    "a 1e-300 Hz cpu": (e("cpu.frequency_hz", 1e-300), ("expected at least 1000 Hz",)),
    "no MACs per cycle": (e("cpu.layer.fc", 1e-300), ("layer.fc: 1e-300 is out of range",)),
    "a megawatt": (
        e("cpu.power_w.idle", 1e6),
        ("power_w.idle: 1e+06 is out of range: expected at most 10000 W",),
    ),  # fmt: skip
    "NaN": (TEXT.replace(FREQ, "NaN"), ("NaN is not a JSON value",)),
    "a string number": (
        e("cpu.frequency_hz", "3e9"),
        ("frequency_hz: expected a number, not text",),
    ),
    "a boolean number": (e("cpu.memory.bias_mb", True), ("memory.bias_mb: expected a number",)),
    "a boolean in a row": (
        e("cpu.regression", {"conv": [0, True, 0, 0]}),
        ("regression.conv[1]: expected a number, not true/false",),
    ),
    "a nameless type": (
        json.dumps({"": GOOD["cpu"]}),
        ('device type "": expected a non-empty text of at most 64 characters',),
    ),
    "a layer key of 65 characters": (
        e("cpu.layer_s", {"k" * 65: 1e-3}),
        ("cpu.layer_s: layer key", "expected a non-empty text of at most 64 characters"),
    ),
    # a fraction where a whole number goes
    "channel_block 0.5": (e("cpu.channel_block", 0.5), ("channel_block: expected an integer",)),
    "channel_block 0": (
        e("cpu.channel_block", 0),
        ("channel_block: 0 is out of range: expected at least 1 channels",),
    ),
    "threads 1.5": (
        e(SR, {"whole_ms": {}, "threads": 1.5}),
        ("speed_reference.threads: expected an integer, not a number",),
    ),
    # rows of the wrong length
    "short row": (
        e("cpu.regression", {"conv": [1e-5, 1e-10]}),
        ("regression.conv: expected a list of 4, not [1e-05, 1e-10]",),
    ),
    "long row": (
        e("cpu.regression", {"any": [0, 0, 0, 0, 0]}),
        ("regression.any: expected a list of 4, not [0, 0, 0, 0, 0]",),
    ),
    "a row of text": (
        e("cpu.regression", {"fc": "1,2,3,4"}),
        ("regression.fc: expected a list of 4",),
    ),
    "a share of 1": (
        e("cpu.part_fixed", {"abc": 1}),
        ("part_fixed.abc: 1 is out of range: expected below 1",),
    ),  # fmt: skip
    "half a weights table": (e("cpu.memory.weights", {"conv": 1.0}), ("'other' is missing",)),
    # a misspelt or unknown key is not silently ignored
    "misspelt key": (
        e("cpu.chanel_block", 16),
        ("unknown key 'chanel_block'", "did you mean 'channel_block'"),
    ),
    "misspelt memory key": (e("cpu.memory.bias", 150), ("unknown key 'bias'", "'bias_mb'")),
    "missing figure": (e("cpu.power_w.idle", ...), ("cpu.power_w: 'idle' is missing",)),
    "misspelt probe key": (
        e(SR, {"whole_ms": {}, "threads": 1, "thread": 2}),
        ("speed_reference: unknown key 'thread' (did you mean 'threads'?)",),
    ),
    # curves
    "bytes decreasing": (
        e("links.x", {B: [2, 1], S: [0, 1e-3]}),
        ("links.x: 'bytes' must increase",),
    ),
    "curve lengths": (
        e("links.x", {B: [1, 2], S: [0]}),
        ("links.x: needs 'bytes' and 'seconds' lists of one length, not 2 and 1",),
    ),
    "an empty curve": (e("links.x", {B: [], S: []}), ("links.x: needs 'bytes' and 'seconds'",)),
    "negative time": (
        e("links.x", {B: [1], S: [-1]}),
        ("links.x.seconds[0]: -1 is out of range: expected at least 0 s",),
    ),
    "a curve of 1001 sizes": (
        e("links.x", {B: list(range(1001)), S: [0] * 1001}),
        ("links.x.bytes: 1001 items, more than 1000",),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_hostile_file_is_one_line_naming_the_file_and_the_key(case: str, tmp_path) -> None:
    text, words = CASES[case]
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(DseError) as err:
        load_coefficients(path)
    message = str(err.value)
    assert "\n" not in message and "hostile.json" in message, message
    for w in words:
        assert w in message, (w, message)


def test_files_that_are_not_json_files_are_one_line(tmp_path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(schema.MAX_BYTES + 1)  # sparse: no 16 MB written
    cases = {
        big: "is 16 MB: a coefficients file is at most 16 MB",
        tmp_path: "is not a regular file",
        tmp_path / "missing.json": "coefficients file not found",
        Path("/dev/null"): "is not a regular file",
    }
    for path, words in cases.items():
        with pytest.raises(DseError, match=words):
            load_coefficients(path)


def test_the_command_line_says_it_in_one_line_with_status_2(tmp_path) -> None:
    """Through dse.evaluate as a user runs it: one line, exit 2, no traceback."""
    picked = ["400 digits", "100000 deep", "channel_block 0.5", "short row", "layer 2.6e301 s"]
    cases, words = {}, {}
    for i, case in enumerate(picked):
        path = tmp_path / f"c{i}.json"
        path.write_text(CASES[case][0])
        unused = f"mapping={tmp_path / 'unused.json'}"  # the coefficients fail first
        cases[case] = ("dse.evaluate", ["+net=alexnet", f"coefficients={path}", unused])
        words[case] = (f"c{i}.json", *CASES[case][1])
    assert_each_one_line(run_all(cases), words)


def test_shipped_and_calibrated_files_pass() -> None:
    """The platforms' files, and a calibration's file with every calibrated field (a real
    calibration of localhost, trimmed: its provenance, a few layers)."""
    for f in sorted((CONF_DIR / "platform").glob("*.json")):
        assert load_coefficients(f).types, f
    cpu = TypeCoefficients.from_dict(GOOD["cpu"], "localhost")
    calibrated = dataclasses.replace(
        cpu,
        layer_s={"8afdc6112ead7503": 0.004089, "cd9846ab269c3c41": 5.373e-05},
        regression={"fc": (1.57e-4, 0.0, 0.0, 8.76e-11), "any": (5.9e-6, 3.1e-11, 6.7e-12, 8e-11)},
        channel_block=16, split_work_factor=1.0242, shared_host_factor=2.7518,
        part_fixed={"8afdc6112ead7503": 0.5383}, part_fixed_channels={"fc": 134.56},
        segment_in_per_byte_s=3.655e-10, segment_out_per_byte_s=1.392e-10, receive_on_device=True,
        memory=Memory(
            coefficient=2.1496, bias_mb=149.2, per_layer_mb=0.2355,
            weights={"conv": 1.075, "other": 0.945}, loading={"conv": 1.434, "other": 1.276},
            held=0.5286, empty_mb=120.54,
        ),
    )  # fmt: skip
    doc = {
        "description": "Calibrated by dse.calibrate on vm for platform 'localhost'",
        "calibrated": True,
        "provenance": {"cuts": {"spread": [0.44, 0.21]}, "quick": True, "seconds": 45.4},
        "cpu": calibrated.to_dict(),
        "links": {"same_host": {"bytes": [64, 256, 1024], "seconds": [2.46e-6, 2.36e-6, 2.4e-6]}},
        "speed_reference": {
            "whole_ms": {"alexnet": 65.35},
            "fingerprints": {"alexnet": "0eed21f5708ff466"},
            "threads": 1,
            "what": "the whole network alone",
        },
    }
    from models_analytical.coefficients import Coefficients

    assert Coefficients.from_dict(doc, "calibrated.json")["cpu"] == calibrated


def test_the_manual_names_every_key_a_section_is_written_with() -> None:
    """A section with every field set (none left out as a default) is written with the keys
    the manual's table names, nested ones by their path, and the table names no other (its
    rows ``table.<name>`` aside: a table's values)."""
    cpu = TypeCoefficients.from_dict(GOOD["cpu"], "localhost")
    full = dataclasses.replace(
        cpu,
        layer_s={"k": 1.0}, profiled_ops=["Conv"], regression={"any": (0.0, 0.0, 0.0, 0.0)},
        channel_block=2,
        transfer_fixed_s=1.0, transfer_per_byte_s=1e-9, transfer_per_byte_same_host_s=1e-9,
        split_work_factor=2.0, shared_host_factor=2.0, part_fixed={"k": 0.5},
        part_fixed_channels={"conv": 1.0}, row_fixed={"conv": 0.5}, segment_run_s=1.0,
        segment_in_per_byte_s=1e-9, segment_out_per_byte_s=1e-9, receive_on_device=True,
        memory=Memory(1.0, 1.0, 1.0, {"conv": 1.0, "other": 1.0}, {"conv": 1.0, "other": 1.0},
                      1.0, 1.0, 1.0),
    )  # fmt: skip
    objects = {"layer", "power_w", "memory", "memory.weights", "memory.loading"}  # not tables

    def paths(doc: dict, at: str = "") -> set[str]:
        out = set()
        for k, v in doc.items():
            out.add(at + k)
            if at + k in objects:
                out |= paths(v, f"{at}{k}.")
        return out

    written = paths(full.to_dict())
    types, _ = schema.reference()
    rows = {line.split("`")[1] for line in types.splitlines()[2:]}
    assert written == {r for r in rows if "<" not in r}
    # power is drawn per op class of the compute model, then during overhead and idle
    assert (*schema.OP_CLASSES, "overhead", "idle") == schema.POWER_CLASSES
    assert len(written) == 43  # 21 fields; layer 4, power_w 6, memory 8 + weights 2 + loading 2


def test_the_manual_holds_the_schema() -> None:
    """docs/reference/coefficients.md holds the schema's tables as the schema renders them."""
    manual = (ROOT / "docs" / "reference" / "coefficients.md").read_text()
    types, top = schema.reference()
    assert types in manual and top in manual


def test_a_byte_order_mark_is_read_as_utf8(tmp_path) -> None:
    """Windows editors start UTF-8 files with a byte-order mark: the file reads as without."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert load_coefficients(path)["cpu"].frequency_hz == 3e9
