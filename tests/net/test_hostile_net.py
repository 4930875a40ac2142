"""Hostile ONNX files and input shapes: each is one line and exit 2, never a traceback, a hang,
gigabytes from a few hundred bytes, or a silently wrong graph."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tests.helpers.onnx_factory as f
from dse.errors import DseError
from dse.net import load_net
from dse.net.build import build_graph
from dse.net.onnx_load import fix_input_shapes
from dse.net.order import memory_aware_order, peak_memory
from tests.helpers.hostile import assert_each_one_line, assert_one_line, refusal, run_all

#: Address space of the whole CLI process in the resource cases: far below what the hostile
#: models ask for (12 GB), well above what loading a small model needs.
CLI_MEMORY = 3 * 2**30


def relu(shape) -> onnx.ModelProto:
    return f.model([helper.make_node("Relu", ["x"], ["y"], name="r")], {"x": shape}, ["y"])


def conv(in_channels: int = 3, weight_channels: int = 3, group: int = 1) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", group=group)
    w = f.weight("w", [8, weight_channels, 3, 3])
    return f.model([node], {"x": [1, in_channels, 8, 8]}, ["y"], [w])


def with_domain(m: onnx.ModelProto, domain: str) -> onnx.ModelProto:
    m.opset_import.append(helper.make_opsetid(domain, 1))
    return m


def memory_bomb() -> onnx.ModelProto:
    """ConstantOfShape to [3, 1e9] (12 GB) beside an op static inference cannot see through,
    so the loader must fold constants and measure shapes: a model of under 300 bytes."""
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
        helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Add", ["big", "g"], ["y"], name="add"),
    ]
    return with_domain(
        f.model(nodes, {"x": [1]}, ["y"], [f.const("shape", [3, 10**9])]), "com.microsoft"
    )


def hidden_memory_bomb() -> onnx.ModelProto:
    """The 12 GB tensor's shape is computed from a tensor only a run can see: no static check
    can size it, so only the measurement's own budget stops it."""
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Shape", ["g"], ["s"], name="shape"),
        helper.make_node("Mul", ["s", "k"], ["s3"], name="mul"),
        helper.make_node("ConstantOfShape", ["s3"], ["big"], name="fill"),
        helper.make_node("Add", ["big", "x"], ["y"], name="add"),
    ]
    m = f.model(nodes, {"x": [1]}, ["y"], [f.const("k", [3 * 10**9])])
    return with_domain(m, "com.microsoft")


def time_bomb() -> onnx.ModelProto:
    """Thirty 2048x2048 products behind a contrib op: a 1 KB file, minutes of compute."""
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [1e-3])
    nodes = [
        helper.make_node("ConstantOfShape", ["ws"], ["w"], name="fill", value=fill),
        helper.make_node("Gelu", ["x"], ["h0"], name="gelu", domain="com.microsoft"),
    ]
    nodes += [
        helper.make_node("MatMul", [f"h{i}", "w"], [f"h{i + 1}"], name=f"mm{i}") for i in range(30)
    ]
    m = f.model(nodes, {"x": [2048, 2048]}, ["h30"], [f.const("ws", [2048, 2048])])
    return with_domain(m, "com.microsoft")


def graph_models() -> dict[str, tuple[onnx.ModelProto, tuple[str, ...]]]:
    """Broken graphs and the words their one line must hold."""
    r = helper.make_node
    return {
        "self loop": (
            f.model([r("Relu", ["y"], ["y"], name="loop")], {"x": [1, 3]}, ["y"]),
            ("'loop' reads its own output",),
        ),
        "cycle of two": (
            f.model(
                [r("Relu", ["b"], ["a"], name="p"), r("Add", ["a", "x"], ["b"], name="q")],
                {"x": [1, 3]},
                ["b"],
            ),
            ("cycle",),
        ),
        "tensor written twice": (
            f.model(
                [r("Relu", ["x"], ["y"], name="one"), r("Sigmoid", ["x"], ["y"], name="two")],
                {"x": [1, 3]},
                ["y"],
            ),
            ("'y' is written by two nodes",),
        ),
        "input overwritten": (
            f.model(
                [r("Relu", ["x"], ["y"], name="a"), r("Sigmoid", ["y"], ["x"], name="b")],
                {"x": [1, 3]},
                ["y"],
            ),
            ("'b' overwrites 'x'",),
        ),
        "output is an input": (
            f.model([r("Relu", ["x"], ["y"], name="r")], {"x": [1, 3]}, ["x"]),
            ("graph output 'x' is a graph input",),
        ),
        "output made by nobody": (
            f.model([r("Relu", ["x"], ["y"], name="r")], {"x": [1, 3]}, ["ghost"]),
            ("'ghost' is produced by no node",),
        ),
        "dimension over 2^31": (relu([1, 3, 2**31 + 5]), ("too large", "'y'")),
        "tensor over a terabyte": (
            relu([2**20, 2**20, 2**10]),
            ("too large", "2^31 - 1"),
        ),
        "conv channels": (conv(in_channels=4), ("receives 4 input channels",)),
        "conv huge group": (conv(group=10**6), ("group=1000000",)),
        "op nobody runs": (
            with_domain(
                f.model(
                    [r("Mystery", ["x"], ["y"], name="m", domain="com.example")],
                    {"x": [1, 3]},
                    ["y"],
                ),
                "com.example",
            ),
            ("cannot be inferred", "running the model failed"),
        ),
        "weight without its data": (
            f.model(
                [r("Conv", ["x", "w"], ["y"], name="c")],
                {"x": [1, 3, 8, 8]},
                ["y"],
                [
                    onnx.TensorProto(
                        name="w", data_type=TensorProto.FLOAT, dims=[10**5, 3, 3, 3], float_data=[0]
                    )
                ],
            ),
            ("weight 'w' declares shape [100000, 3, 3, 3]", "holds 1"),
        ),
        "weight of negative shape": (
            f.model(
                [r("Add", ["x", "w"], ["y"], name="a")],
                {"x": [1, 3]},
                ["y"],
                [onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-3])],
            ),
            ("weight 'w' has impossible shape [-3]",),
        ),
        "names with line breaks": (
            f.model(
                [r("Relu", ["x"], ["y"], name="evil\nname"), r("Sigmoid", ["x"], ["y"], name="b")],
                {"x": [1, 3]},
                ["y"],
            ),
            ("'evil name' and 'b'",),
        ),
        "constant without its data": (
            f.model(
                [
                    r(
                        "Constant",
                        [],
                        ["k"],
                        name="k",
                        value=onnx.TensorProto(
                            name="k", data_type=TensorProto.FLOAT, dims=[10**9], float_data=[1]
                        ),
                    ),
                    r("Add", ["x", "k"], ["y"], name="a"),
                ],
                {"x": [1]},
                ["y"],
            ),
            ("declares shape [1000000000]", "holds 1"),
        ),
        "reshape to fewer values": (
            f.model(
                [r("Reshape", ["x", "s"], ["y"], name="rs")],
                {"x": [1, 3, 4, 4]},
                ["y"],
                [f.const("s", [5, 7])],
            ),
            ("'rs'", "(48 values) gives shape [5, 7] (35 values)"),
        ),
        "no outputs": (
            f.model([r("Relu", ["x"], ["y"], name="r")], {"x": [1, 3]}, []),
            ("no graph outputs",),
        ),
        "input listed twice": (
            f.model([r("Add", ["x", "x"], ["y"], name="a")], {"x": [1, 3]}, ["y"]),
            ("graph input 'x' is listed twice",),
        ),
        "only constants": (
            f.model(
                [r("Add", ["k", "k"], ["y"], name="a")], {"x": [1]}, ["y"], [f.const("k", [1])]
            ),
            ("no compute layers",),
        ),
    }


#: Shapes given as net.input_shape on the command line, and the words of their one line.
#: (as typed, as Hydra parses it, words)
SHAPES = {
    "shape with a letter": ("[1,a,4]", [1, "a", 4], ("whole numbers",)),
    "shape with a float": ("[1.5,3,4]", [1.5, 3, 4], ("whole numbers",)),
    "shape with a bool": ("[true,3,4]", [True, 3, 4], ("whole numbers",)),
    "shape nested": ("[[1],3,4]", [[1], 3, 4], ("whole numbers",)),
    "shape a bare number": ("5", 5, ("must be a list of dimensions", "not 5")),
    "shape a string": ("abc", "abc", ("must be a list of dimensions", "'abc'")),
    "shape of wrong rank": ("[1,3]", [1, 3], ("rank 2", "rank 3")),
    "shape zero": ("[0,3,4]", [0, 3, 4], ("from 1 to 2^31 - 1",)),
    "shape negative": ("[-1,3,4]", [-1, 3, 4], ("from 1 to 2^31 - 1",)),
    "shape over 2^31": ("[3000000000,3,4]", [3 * 10**9, 3, 4], ("from 1 to 2^31 - 1",)),
    "shape mapping to a number": ("{x:5}", {"x": 5}, ("net.input_shape.x must be a list",)),
    "shape conflicting": ("[1,4,4]", [1, 4, 4], ("conflicts with input 'x'",)),
}
#: The cases also run through the command line (one per kind: each costs a process start).
CLI_CASES = (
    "self loop",
    "tensor written twice",
    "dimension over 2^31",
    "op nobody runs",
    "truncated protobuf",
    "symlink loop",
    "named pipe",
    "shape with a letter",
    "shape a bare number",
    "measure budget nan",
)


def slug(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, tuple[dict, tuple[str, ...]]]:
    """Every case of this module as a net config and the words its one line must hold."""
    d = tmp_path_factory.mktemp("hostile_net")
    cases: dict[str, tuple[dict, tuple[str, ...]]] = {}

    def case(key: str, path, words: tuple[str, ...], **net) -> None:
        cases[key] = ({"name": "onnx", "path": str(path), **net}, words)

    for key, (m, words) in graph_models().items():
        if key == "input listed twice":
            m.graph.input.append(m.graph.input[0])
        path = d / f"{slug(key)}.onnx"
        onnx.save(m, path)
        case(key, path, words)
    # files that are not ONNX models
    good = d / "good.onnx"
    onnx.save(conv(), good)
    data = good.read_bytes()
    (d / "empty.onnx").write_bytes(b"")
    (d / "garbage.onnx").write_bytes(np.random.default_rng(0).bytes(300))
    (d / "truncated.onnx").write_bytes(data[: len(data) // 2])
    (d / "folder.onnx").mkdir()
    os.symlink(d / "loop.onnx", d / "loop.onnx")
    os.mkfifo(d / "pipe.onnx")  # reading it would wait forever
    case("empty file", d / "empty.onnx", ("not an ONNX model",))
    case("garbage", d / "garbage.onnx", ("not an ONNX model",))
    case("truncated protobuf", d / "truncated.onnx", ("not an ONNX model",))
    case("directory", d / "folder.onnx", ("is a directory",))
    case("symlink loop", d / "loop.onnx", ("loop.onnx",))
    case("named pipe", d / "pipe.onnx", ("not a regular file",))
    case("device", "/dev/zero", ("not a regular file",))
    # weights in a "file" that never ends, read only when shapes must be measured
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="zero.bin")
    os.symlink("/dev/zero", d / "zero.bin")
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Add", ["g", "w"], ["y"], name="add"),
    ]
    zero = with_domain(f.model(nodes, {"x": [1]}, ["y"], [w]), "com.microsoft")
    onnx.save(zero, d / "zero_weights.onnx")
    case("weights from /dev/zero", d / "zero_weights.onnx", ("outside the model's folder",))
    dynamic = d / "dynamic.onnx"
    onnx.save(relu(["N", 3, 4]), dynamic)
    for key, (_, value, words) in SHAPES.items():
        case(key, dynamic, words, input_shape=value)
    case("measure budget nan", dynamic, ("net.measure_seconds",), measure_seconds="nan")
    case(
        "huge budgets",
        d / f"{slug('op nobody runs')}.onnx",
        ("running the model failed", "com.example:Mystery"),
        measure_mb=1e30,
        measure_seconds=1e300,
    )
    case("order unknown", good, ("net.order",), order="random")
    return cases


def cli_args(key: str, net: dict) -> list[str]:
    if key in SHAPES:
        net = {**net, "input_shape": SHAPES[key][0]}
    return ["+net=onnx", *(f"net.{k}={v}" for k, v in net.items() if k != "name")]


def test_cli_cases_are_one_line_each(hostile):
    results = run_all({k: ("dse.inspect", cli_args(k, hostile[k][0])) for k in CLI_CASES})
    assert_each_one_line(results, {k: hostile[k][1] for k in CLI_CASES})


def test_every_case_is_one_dse_error(hostile):
    """The same cases and more, in this process: a DseError with the expected words, nothing
    else."""
    failed = []
    for key, (net, words) in hostile.items():
        if key == "measure budget nan":
            continue  # a check of the composed config (dse.config.check): see the CLI case
        if (problem := refusal(key, words, lambda net=net: load_net(net))) is not None:
            failed.append(problem)
    assert not failed, "\n".join(failed)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bombs")
    paths = {}
    for key, m in [
        ("memory", memory_bomb()),
        ("hidden memory", hidden_memory_bomb()),
        ("time", time_bomb()),
    ]:
        paths[key] = d / f"{key.replace(' ', '_')}.onnx"
        onnx.save(m, paths[key])
    assert paths["memory"].stat().st_size < 300
    cases = {
        "memory": ("dse.inspect", ["+net=onnx", f"net.path={paths['memory']}"]),
        "hidden memory": (
            "dse.inspect",
            ["+net=onnx", f"net.path={paths['hidden memory']}", "net.measure_mb=1024"],
        ),
        "time": (
            "dse.inspect",
            ["+net=onnx", f"net.path={paths['time']}", "net.measure_seconds=2"],
        ),
    }
    # the whole CLI process gets 3 GB of address space: folding the 12 GB constant, or running
    # the model in-process, would end in a MemoryError traceback, not in the budget's line
    return run_all(cases, memory_bytes=CLI_MEMORY)


def test_a_tiny_model_asking_for_gigabytes_is_refused_before_allocating(bombs):
    assert_one_line(bombs["memory"], "measuring the shapes", "11444 MB", "net.measure_mb")


def test_a_model_exceeding_the_memory_budget_when_run_is_one_line(bombs):
    assert_one_line(bombs["hidden memory"], "more than 1024 MB", "net.measure_mb")


def test_a_model_exceeding_the_time_budget_when_run_is_one_line(bombs):
    assert_one_line(bombs["time"], "more than 2 s", "net.measure_seconds")


def test_large_constants_are_not_folded():
    """Folding evaluates small shape computations only: the 12 GB fill stays a node (it would
    take the test process down otherwise), the small one is folded."""
    from dse.net.onnx_load import fold_constants, infer_types

    nodes = [
        helper.make_node("ConstantOfShape", ["big_shape"], ["big"], name="big_fill"),
        helper.make_node("ConstantOfShape", ["small_shape"], ["small"], name="small_fill"),
        helper.make_node("Add", ["big", "x"], ["y"], name="add"),
        helper.make_node("Add", ["small", "x"], ["z"], name="add2"),
    ]
    inits = [f.const("big_shape", [3, 10**9]), f.const("small_shape", [2, 3])]
    m = f.model(nodes, {"x": [1]}, ["y", "z"], inits)
    folded = fold_constants(m, infer_types(m))
    assert [n.name for n in folded.graph.node] == ["big_fill", "add", "add2"]
    small = next(t for t in folded.graph.initializer if t.name == "small")
    assert list(small.dims) == [2, 3]


def test_sizes_of_unknown_outputs_come_from_node_inference():
    """Range to 1e10 has no inferred type in the model (its limit is an input of the node only
    through a Cast): the size check infers the node on its input values and refuses."""
    from dse.net.onnx_load import fold_constants

    nodes = [
        helper.make_node("Cast", ["limit_f"], ["limit"], name="cast", to=TensorProto.INT64),
        helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="range"),
        helper.make_node("Cast", ["r"], ["rf"], name="cast2", to=TensorProto.FLOAT),
        helper.make_node("Add", ["rf", "x"], ["y"], name="add"),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array(1e10, dtype=np.float32), "limit_f"),
        onnx.numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        onnx.numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
    ]
    m = f.model(nodes, {"x": [1]}, ["y"], inits)
    folded = fold_constants(m, {})  # nothing known: every size comes from the node itself
    assert [n.name for n in folded.graph.node] == ["range", "cast2", "add"]


def test_the_shape_of_a_folded_value_folds():
    """YOLOv8's detection head takes the Shape of anchors it builds from constants (a Range):
    no type is inferred for them, so the Shape folds from the value folded before it."""
    from dse.net.onnx_load import fold_constants

    nodes = [
        helper.make_node("Cast", ["limit_f"], ["limit"], name="cast", to=TensorProto.INT64),
        helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="range"),
        helper.make_node("Shape", ["r"], ["n"], name="shape"),
        helper.make_node("Reshape", ["x", "n"], ["y"], name="reshape"),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array(6.0, dtype=np.float32), "limit_f"),
        onnx.numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        onnx.numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
    ]
    m = f.model(nodes, {"x": [2, 3]}, ["y"], inits)
    folded = fold_constants(m, {})  # nothing inferred: the Range's size comes from its value
    assert [n.name for n in folded.graph.node] == ["reshape"]
    n = next(t for t in folded.graph.initializer if t.name == "n")
    assert onnx.numpy_helper.to_array(n).tolist() == [6]


@pytest.mark.parametrize(
    "shape, words",
    [
        ([1, "a", 4], "whole numbers"),
        ([1.0, 3, 4], "whole numbers"),
        (7, "must be a list"),
        ("1,3,4", "must be a list"),
        ({"x": "134"}, "net.input_shape.x must be a list"),
        ([1, 3, 0], "from 1 to 2^31 - 1"),
    ],
)
def test_input_shapes_are_checked_where_they_enter(shape, words):
    with pytest.raises(DseError, match=words.replace("^", r"\^")):
        fix_input_shapes(relu(["N", 3, 4]), shape)


def test_zero_sized_activation_is_refused():
    """An activation with no elements (a Slice that keeps nothing) is a broken model."""
    nodes = [helper.make_node("Slice", ["x", "s0", "s0"], ["y"], name="empty_slice")]
    m = f.model(nodes, {"x": [4, 3]}, ["y"], [f.const("s0", [0])])
    with pytest.raises(DseError, match="'y' of shape \\[0, 3\\] has no elements"):
        build_graph(m, "m")


def wide(n: int) -> onnx.ModelProto:
    """x (4 KB) -> n branches Tile (1 MB) -> Slice (4 KB) -> Sum (4 KB), stored breadth first:
    as stored every 1 MB tile is live at once; one branch at a time keeps one."""
    tile = [helper.make_node("Tile", ["x", "ten"], [f"t{i}"], name=f"t{i}") for i in range(n)]
    cut = [
        helper.make_node("Slice", [f"t{i}", "s0", "s1"], [f"c{i}"], name=f"c{i}") for i in range(n)
    ]
    cat = helper.make_node("Sum", [f"c{i}" for i in range(n)], ["y"], name="sum")
    inits = [f.const("ten", [250]), f.const("s0", [0]), f.const("s1", [1000])]
    return f.model([*tile, *cut, cat], {"x": [1000]}, ["y"], inits)


def test_wide_graphs_fall_back_to_finishing_branches_one_by_one():
    """300 branches exceed the programme's budget; the order found must still be topological
    and finish each branch before the next: peak by hand = x + all slices + one tile."""
    g = build_graph(wide(300), "wide")
    order = memory_aware_order(g)
    g.reordered(order)  # raises unless the order is a topological permutation
    x, tile, piece = 4000, 1_000_000, 4000
    # as stored: x and every tile (x is freed by the last tile, before the first slice)
    assert peak_memory(g, range(len(g))) == x + 300 * tile
    # one by one: at the last tile, x, 299 slices and that tile are live
    assert peak_memory(g, order) == x + 299 * piece + tile


def test_the_budget_keeps_small_graphs_optimal():
    """Under a budget of one expansion the two-branch graph still gets its 12 MB order (the
    depth-first finish), and with the default budget the programme's own optimum."""
    g = build_graph(f.two_branches(), "two")
    assert peak_memory(g, memory_aware_order(g, expansions=1)) == 12e6
    assert peak_memory(g, memory_aware_order(g)) == 12e6


def test_load_net_refuses_a_net_that_is_not_a_mapping():
    with pytest.raises(DseError, match="net must be a mapping"):
        load_net("alexnet")  # type: ignore[arg-type]


def test_a_slice_of_a_huge_tile_is_sized_without_evaluating_anything():
    """ONNX's data propagation walks every element of a 1-D tensor a Slice reads: a Tile to
    1e9 elements then a Slice hung it. Shapes come from inference without it: exact, at once."""
    nodes = [
        helper.make_node("Tile", ["x", "reps"], ["t"], name="tile"),
        helper.make_node("Slice", ["t", "s0", "s1"], ["y"], name="cut"),
    ]
    inits = [f.const("reps", [10**6]), f.const("s0", [0]), f.const("s1", [10])]
    g = build_graph(f.model(nodes, {"x": [1000]}, ["y"], inits), "m")
    assert [layer.output_shape for layer in g] == [(10**9,), (10,)]


def test_the_budget_does_not_cut_the_zoo():
    """GoogLeNet, the zoo's widest net, needs the most work; the default budget lets the
    programme finish, so its order is the unbounded programme's."""
    g = load_net({"name": "googlenet", "order": "file"}).graph
    assert memory_aware_order(g) == memory_aware_order(g, expansions=10**12)
