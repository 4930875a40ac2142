"""Hostile mapping.json and horizontal.json files: wrong types, NaN, bad bytes, deep nesting,
empty and huge files, bad split points. Each is one line and exit 2, never a traceback or a
string read letter by letter; what `dse.evaluate` prints as JSON is valid JSON."""

from __future__ import annotations

import json
import math

import onnx
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from dse.errors import DseError
from dse.files import read_json
from dse.mapping import from_autodice
from dse.mapping.autodice import read_autodice
from dse.net import load_net
from tests.helpers.hostile import assert_each_one_line, refusal, run_all

CPU0, CPU1 = "localhost_cpu0", "localhost_cpu1"
KEYS = [CPU0, CPU1]


def conv_relu() -> onnx.ModelProto:
    """conv (8 output channels, splittable) -> relu (not splittable)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return f.model(nodes, {"x": [1, 3, 8, 8]}, ["y"], [f.weight("w", [8, 3, 3, 3])])


SPLIT = {CPU0: ["conv", "relu"], CPU1: ["conv"]}
#: mapping.json, horizontal.json (None: none) and the words of the one line
CASES: dict[str, tuple[object, object, tuple[str, ...]]] = {
    "number for a node list": ({CPU0: 5}, None, ("list of node names", "not 5")),
    "string for a node list": ({CPU0: "conv"}, None, ("list of node names", "'conv'")),
    "list for the mapping": ([1, 2], None, ("must be an object",)),
    "nested node list": ({CPU0: [["conv", "relu"]]}, None, ("list of node names",)),
    "null node list": ({CPU0: None}, None, ("list of node names",)),
    "unknown device": ({"pluto_cpu": ["conv", "relu"]}, None, ("unknown device 'pluto_cpu'",)),
    "unmapped node": ({CPU0: ["conv"]}, None, ("'relu' is mapped to no device",)),
    "split of an unsplittable layer": (
        {CPU0: ["conv", "relu"], CPU1: ["relu"]},
        None,
        ("'relu' (Relu) cannot be split",),
    ),
    "horizontal a number": (SPLIT, {"conv": 5}, ('["lop"', "not 5")),
    "horizontal a string": (SPLIT, {"conv": "lop"}, ('["lop"', "not 'lop'")),
    "horizontal a list": (SPLIT, [1], ("horizontal.json must be an object",)),
    "split points a string": (SPLIT, {"conv": ["lop", "4", KEYS]}, ("are lists",)),
    "devices a string": (SPLIT, {"conv": ["lop", [4], CPU0]}, ("are lists",)),
    "split point float": (SPLIT, {"conv": ["lop", [4.5], KEYS]}, ("whole channel indices",)),
    "split point bool": (SPLIT, {"conv": ["lop", [True], KEYS]}, ("whole channel indices",)),
    "split point negative": (SPLIT, {"conv": ["lop", [-2], KEYS]}, ("inside (0, 8)",)),
    "split point zero": (SPLIT, {"conv": ["lop", [0], KEYS]}, ("inside (0, 8)",)),
    "split point at channels": (SPLIT, {"conv": ["lop", [8], KEYS]}, ("inside (0, 8)",)),
    "split point beyond channels": (SPLIT, {"conv": ["lop", [20], KEYS]}, ("inside (0, 8)",)),
    "too many split points": (SPLIT, {"conv": ["lop", [2, 4], KEYS]}, ("need 1 split point",)),
    "device twice": (SPLIT, {"conv": ["lop", [4], [CPU0, CPU0]]}, ("lists a device twice",)),
    "device not in mapping": (
        {CPU0: ["conv", "relu"]},
        {"conv": ["lop", [4], KEYS]},
        ("mapping.json places it on localhost_cpu0", "a search wrote together"),
    ),
    "horizontal unsplittable layer": (
        SPLIT,
        {"relu": ["lop", [4], KEYS]},
        ("mapping.json places it on localhost_cpu0", "a search wrote together"),
    ),
    "split without horizontal": (SPLIT, None, ("no horizontal.json", "horizontal=")),
    "split without its entry": (SPLIT, {}, ("no entry for node 'conv'", "a search wrote")),
    "horizontal unknown node": (SPLIT, {"pool9": ["lop", [4], KEYS]}, ("unknown node 'pool9'",)),
    "not lop": (SPLIT, {"conv": ["oop", [4], KEYS]}, ('["lop"',)),
}
#: Raw file contents that are not a JSON mapping at all.
RAW: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "empty file": (b"", ("is empty",)),
    "blank file": (b" \n\t\n", ("is empty",)),
    "NaN": (b'{"localhost_cpu0": NaN}', ("NaN is not a JSON value",)),
    "Infinity": (b'{"conv": ["lop", [Infinity], []]}', ("Infinity is not a JSON value",)),
    "non-UTF-8 bytes": (b'{"localhost_cpu0": ["\xff\xfe"]}', ("not UTF-8",)),
    "deep nesting": (b"[" * 100_000 + b"]" * 100_000, ("nested too deeply",)),
    "duplicate key": (
        b'{"localhost_cpu0": ["conv"], "localhost_cpu0": ["conv", "relu"]}',
        ("'localhost_cpu0' appears twice",),
    ),
    "truncated": (b'{"localhost_cpu0": ["conv", "re', ("not valid JSON",)),
}
CLI_CASES = (
    "number for a node list",
    "string for a node list",
    "horizontal a string",
    "split point beyond channels",
    "NaN",
    "non-UTF-8 bytes",
    "deep nesting",
    "empty file",
    "huge file",
    "split without horizontal",
)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    path = tmp_path_factory.mktemp("net") / "conv_relu.onnx"
    onnx.save(conv_relu(), path)
    return path, load_net({"name": "onnx", "path": str(path)}).graph


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Every case as (mapping path, horizontal path or None, words)."""
    d = tmp_path_factory.mktemp("mappings")
    out = {}
    for i, (key, (mapping, horizontal, words)) in enumerate(CASES.items()):
        m = d / f"mapping{i}.json"
        m.write_text(json.dumps(mapping))
        h = None
        if horizontal is not None:
            h = d / f"horizontal{i}.json"
            h.write_text(json.dumps(horizontal))
        out[key] = (m, h, words)
    for i, (key, (raw, words)) in enumerate(RAW.items()):
        m = d / f"raw{i}.json"
        m.write_bytes(raw)
        out[key] = (m, None, words)
    huge = d / "huge.json"
    with open(huge, "wb") as fh:  # sparse: 65 MB on paper, no disk used
        fh.truncate(65 * 2**20)
    out["huge file"] = (huge, None, ("65 MB", "at most 64 MB"))
    good = d / "split.json"
    good.write_text(json.dumps(SPLIT))
    good_h = d / "split_horizontal.json"
    good_h.write_text(json.dumps({"conv": ["lop", [3], KEYS]}))
    out["good"] = (good, good_h, ())
    return out


def test_cli_cases_are_one_line_each(net, files):
    path, _ = net
    base = ["+net=onnx", f"net.path={path}", "platform=localhost"]
    cases = {}
    for key in CLI_CASES:
        m, h, _ = files[key]
        cases[key] = ("dse.evaluate", [*base, f"mapping={m}", *([f"horizontal={h}"] if h else [])])
    assert_each_one_line(run_all(cases), {key: files[key][2] for key in CLI_CASES})


def test_every_case_is_one_dse_error(net, files):
    _, graph = net
    failed = []
    for key, (m, h, words) in files.items():
        if key == "good":
            continue

        def call(m=m, h=h) -> None:
            mapping = read_json(str(m), "mapping")
            horizontal = read_json(str(h), "horizontal") if h else None
            from_autodice(graph, KEYS, mapping, horizontal)

        if (problem := refusal(key, words, call)) is not None:
            failed.append(problem)
    assert not failed, "\n".join(failed)


def test_a_good_split_reads_its_channel_shares(net):
    """The control: conv split 3 | 5 channels between the CPUs, relu on CPU0."""
    _, graph = net
    batch = from_autodice(graph, KEYS, SPLIT, {"conv": ["lop", [3], KEYS]})
    share = batch.dense(graph)[0]
    assert share[0, graph.index["conv"]].tolist() == [3 / 8, 5 / 8]
    assert share[0, graph.index["relu"]].tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("mapping", "horizontal", "message"),
    [
        (
            SPLIT,
            None,
            "mapping.json splits node 'conv' over 2 devices (1 split node), but no "
            "horizontal.json was given: pass the horizontal.json written beside it "
            "(horizontal=; a search writes both files)",
        ),
        (
            SPLIT,
            {},
            "horizontal.json has no entry for node 'conv', which mapping.json splits over 2 "
            "devices (1 split node without one): the files are not of one mapping; pass the "
            "mapping.json and horizontal.json a search wrote together",
        ),
        (
            {CPU0: ["relu"], CPU1: ["conv"]},
            {"conv": ["lop", [4], KEYS]},
            "horizontal.json entry 'conv' splits it over localhost_cpu0, localhost_cpu1, but "
            "mapping.json places it on localhost_cpu1: the files are not of one mapping; pass "
            "the mapping.json and horizontal.json a search wrote together",
        ),
        (
            SPLIT,
            {"conv": ["lop", [4], [CPU1]]},
            "horizontal.json entry 'conv' splits it over localhost_cpu1, but mapping.json "
            "places it on localhost_cpu0, localhost_cpu1: the files are not of one mapping; "
            "pass the mapping.json and horizontal.json a search wrote together",
        ),
        (
            SPLIT,
            {"conv": ["lop", [2, 4], KEYS]},
            "horizontal.json entry 'conv' has 2 split points for its 2 devices: 2 parts need 1 "
            "split point",
        ),
    ],
)
def test_split_nodes_need_their_entry_and_the_files_must_agree(net, mapping, horizontal, message):
    """A node mapping.json splits is read only with its horizontal.json entry (no silent equal
    parts), and an entry must split the node over the devices mapping.json gives it."""
    _, graph = net
    with pytest.raises(DseError) as err:
        from_autodice(graph, KEYS, mapping, horizontal)
    assert str(err.value) == message


def test_an_entry_on_an_unsplit_node_with_its_one_device_is_read(net):
    """An entry that agrees with mapping.json about a node on one device says nothing more."""
    _, graph = net
    one = {CPU0: ["conv", "relu"]}
    batch = from_autodice(graph, KEYS, one, {"conv": ["lop", [], [CPU0]]})
    assert batch.dense(graph)[0][0, graph.index["conv"]].tolist() == [1.0, 0.0]


def test_a_pool_on_its_producers_bands_needs_no_split_of_its_own(tmp_path):
    """A MaxPool after a Conv split by rows runs on the Conv's bands: listed on the Conv's
    devices (with a "spatial" entry of its own) it is told so and what to write instead; on one
    device, an entry that only says so is accepted and changes nothing."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    path = tmp_path / "conv_pool.onnx"
    onnx.save(f.model(nodes, {"x": [1, 3, 8, 8]}, ["y"], [f.weight("w", [8, 3, 3, 3])]), path)
    graph = load_net({"name": "onnx", "path": str(path)}).graph
    conv = ["spatial", [4], KEYS]
    with pytest.raises(DseError) as info:
        from_autodice(graph, KEYS, {CPU0: ["conv", "pool"], CPU1: ["conv", "pool"]},
                      {"conv": conv, "pool": ["spatial", [2], KEYS]})  # fmt: skip
    assert str(info.value) == (
        "layer 'pool' (MaxPool) cannot be split across devices: it runs on the parts (or "
        "bands) of 'conv' (Conv) wherever that layer is split; map it to one device, with no "
        "horizontal.json entry"
    )
    mapping = {CPU0: ["conv", "pool"], CPU1: ["conv"]}
    plain = from_autodice(graph, KEYS, mapping, {"conv": conv})
    said = from_autodice(graph, KEYS, mapping, {"conv": conv, "pool": ["spatial", [], [CPU0]]})
    assert said.ident(0) == plain.ident(0)
    assert said.axis.tolist() == [[1]] and said.sizes[0].tolist() == [[4, 2]]


def test_a_mapping_found_for_another_platform_or_network_names_it(net, tmp_path):
    """A run's best mapping (``RUN/best_latency/mapping.json`` beside ``RUN/summary.json``)
    read on another platform, or for another network, names what it was found for and the
    option to pass; without a summary, the plain line stays."""
    path, graph = net
    run = tmp_path / "run"
    (run / "best_latency").mkdir(parents=True)
    summary = run / "summary.json"
    summary.write_text(json.dumps({"net": "conv_relu", "platform": "jetson_xavier_nx_x8"}))
    xavier = run / "best_latency" / "mapping.json"
    xavier.write_text(json.dumps({"xavier0_cpu": ["conv", "relu"]}))
    with pytest.raises(DseError) as info:
        read_autodice(graph, KEYS, "localhost", str(xavier))
    assert str(info.value) == (
        "mapping names unknown device 'xavier0_cpu': the mapping was found on platform "
        f"jetson_xavier_nx_x8 ({summary}), not localhost: pass platform=jetson_xavier_nx_x8"
    )
    summary.write_text(json.dumps({"net": "vgg16", "platform": "localhost"}))
    vgg = run / "best_latency" / "mapping.json"
    vgg.write_text(json.dumps({CPU0: ["conv1_1", "relu1_1"]}))
    with pytest.raises(DseError) as info:
        read_autodice(graph, KEYS, "localhost", str(vgg))
    assert str(info.value) == (
        "mapping names unknown node 'conv1_1' (device 'localhost_cpu0'): the mapping was found "
        f"for network vgg16 ({summary}), not conv_relu: pass +net=vgg16"
    )
    args = ["+net=onnx", f"net.path={path}", "platform=localhost", f"mapping={vgg}"]
    r = run_all({"evaluate": ("dse.evaluate", args)})
    assert r["evaluate"].stderr == f"error: {info.value}\n" and r["evaluate"].returncode == 2
    summary.unlink()
    with pytest.raises(DseError) as info:
        read_autodice(graph, KEYS, "localhost", str(vgg))
    assert str(info.value) == (
        "mapping names unknown node 'conv1_1' (device 'localhost_cpu0'): see python -m "
        "dse.inspect for the layer names"
    )


def test_json_output_is_strict_json(net, files):
    """`format=json` prints numbers only: no NaN or Infinity, which strict parsers reject."""
    path, _ = net
    r = run_all(
        {
            "json": (
                "dse.evaluate",
                [
                    "+net=onnx",
                    f"net.path={path}",
                    "platform=localhost",
                    f"mapping={files['good'][0]}",
                    f"horizontal={files['good'][1]}",
                    "format=json",
                ],
            )
        }
    )["json"]
    assert r.returncode == 0, r.stderr

    def refuse(name: str) -> float:
        raise AssertionError(f"{name} in the JSON output")

    doc = json.loads(r.stdout, parse_constant=refuse)
    assert doc["feasible"] is True
    assert math.isfinite(doc["latency_ms"]) and doc["latency_ms"] > 0
    assert set(doc["memory_mb"]) == {CPU0, CPU1}


def test_non_finite_figures_print_as_null():
    from dse.files import finite

    doc = {"a": float("inf"), "b": [1.0, float("nan")], "c": {"d": -float("inf"), "e": 2}}
    text = json.dumps(finite(doc), allow_nan=False)
    assert json.loads(text) == {"a": None, "b": [1.0, None], "c": {"d": None, "e": 2}}


@pytest.mark.parametrize("target", ["directory", "device"])
def test_a_mapping_that_is_not_a_file_is_one_line(tmp_path, target):
    path = tmp_path if target == "directory" else "/dev/zero"
    with pytest.raises(DseError, match="not a regular file"):
        read_json(str(path), "mapping")
