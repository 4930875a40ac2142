"""Hostile settings of a deploy, each one line with exit status 2 before any work: an out=
that cannot be written or that mpiexec cannot take (a colon or comma in its path), a time
limit that is no limit, a negative stream, a split mapping without its horizontal.json;
mpiexec's temporary folder that cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from dse.errors import DseError
from dse.mapping import to_autodice
from dse.runtime.launch.mpiexec import Launcher, check_session_folder
from dse.runtime.rank.sessions import newer_ops, session
from tests.helpers.hostile import assert_each_one_line, assert_one_line, run_all
from tests.helpers.nets import aba_batch, on_devices, zoo_like
from tests.helpers.onnx_factory import model


def test_bad_deploy_settings_are_one_line_before_any_work(tmp_path: Path) -> None:
    net = zoo_like(tmp_path)
    mapping, _ = to_autodice(net.graph, ["localhost_cpu0", "localhost_cpu1"], aba_batch(net))
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    split = on_devices(net, 2, [[0, 1]] + [[0]] * (len(net.graph) - 1))  # conv_a on both
    split_mapping, _ = to_autodice(net.graph, ["localhost_cpu0", "localhost_cpu1"], split)
    (tmp_path / "split.json").write_text(json.dumps(split_mapping))
    (tmp_path / "a_file").write_text("")
    common = ["+net=onnx", f"net.path={tmp_path / 'zoo_like.onnx'}", "platform=localhost",
              f"mapping={tmp_path / 'mapping.json'}"]  # fmt: skip
    out = f"out={tmp_path / 'dep'}"
    cases = {
        "out in /proc": ([*common, "out=/proc/dse-deploy"], ("out=/proc/dse-deploy", "/proc")),
        "out under a file": (
            [*common, f"out={tmp_path / 'a_file' / 'dep'}"],
            ("a_file is a file, not a folder",),
        ),
        "timeout nan": ([*common, out, "measure=true", "timeout_s=nan"], ("timeout_s", "finite")),
        "timeout inf": ([*common, out, "measure=true", "timeout_s=inf"], ("timeout_s", "finite")),
        "timeout 0": ([*common, out, "measure=true", "timeout_s=0"], ("timeout_s", "positive")),
        "stream -1": ([*common, out, "stream=-1"], ("stream=-1 must be 0 (off) or more",)),
        "colon in out": (
            [*common, f"out={tmp_path / 'a:b'}"],
            ("':' in its path", "mpiexec cannot take", "choose a out="),
        ),
        "comma in out": ([*common, f"out='{tmp_path / 'a,b'}'"], ("',' in its path",)),
        "split without horizontal": (
            [*common, f"mapping={tmp_path / 'split.json'}", out],
            ("splits node 'conv_a' over 2 devices", "no horizontal.json", "horizontal="),
        ),
    }
    results = run_all({k: ("dse.deploy", a) for k, (a, _) in cases.items()})
    assert_each_one_line(results, {k: w for k, (_, w) in cases.items()})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a_file",
        "mapping.json",
        "split.json",
        "zoo_like.onnx",
    ]


def test_mpiexecs_temporary_folder_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    for folder, why in (("/proc/dse-none", "/proc"), (tmp_path / "a_file", "is a file")):
        with pytest.raises(DseError, match=f"TMPDIR={folder} is not .*{why}.*set TMPDIR"):
            check_session_folder(Launcher(env={"TMPDIR": str(folder)}))
    check_session_folder(Launcher(env={"TMPDIR": str(tmp_path)}))  # a good one passes


def test_a_model_onnxruntime_cannot_run_is_one_line(tmp_path: Path) -> None:
    """A model stamped with an ai.onnx opset beyond onnxruntime's: dse.deploy names the opset,
    the one onnxruntime runs up to and the fix, and writes nothing; an op onnxruntime has not
    at the model's opset (Gelu came at opset 20) is named with its node."""
    net = zoo_like(tmp_path)
    mapping, _ = to_autodice(net.graph, ["localhost_cpu0", "localhost_cpu1"], aba_batch(net))
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    path = tmp_path / "zoo_like.onnx"
    proto = onnx.load(str(path))
    proto.opset_import[0].version = 30
    onnx.save(proto, str(path))
    args = ["+net=onnx", f"net.path={path}", "platform=localhost",
            f"mapping={tmp_path / 'mapping.json'}", f"out={tmp_path / 'dep'}"]  # fmt: skip
    most = 28  # onnxruntime 1.32's
    assert ort.__version__ == "1.32.0"
    line = (
        f"{path} imports ai.onnx opset 30 (none of its ops needs more than {most}); "
        f"onnxruntime 1.32.0 runs up to opset {most}: export the model at opset {most} or "
        "lower, or upgrade onnxruntime"
    )
    r = run_all({"opset 30": ("dse.deploy", args)})["opset 30"]
    assert_one_line(r, line)
    assert not (tmp_path / "dep").exists()
    first = proto.graph.node[0]
    assert newer_ops(proto, 30, 9) == f"{first.op_type} (node '{first.name}', opset 22)"
    gelu = model([helper.make_node("Gelu", ["x"], ["y"], name="g")], {"x": [1, 4]}, ["y"])
    with pytest.raises(DseError) as info:
        session(gelu)
    assert str(info.value) == (
        "the model: onnxruntime 1.32.0 has no Gelu at ai.onnx opset 17 (node 'g'): "
        "export the model at an opset that has Gelu"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--host", "xavier0"], "--host xavier0 must be HOST=NAME: the plan's host, then the name "
         "ssh reaches it by (e.g. --host xavier0=192.168.1.10)"),
        (["--host", "=10.0.0.2"], "--host =10.0.0.2 must be HOST=NAME: the plan's host, then the "
         "name ssh reaches it by (e.g. --host xavier0=192.168.1.10)"),
        (["--rsh", "'ssh -p 22"], "--rsh \"'ssh -p 22\" is not a command (No closing quotation): "
         "quote it as a shell would, e.g. --rsh 'ssh -p 2222'"),
        (["--rsh", ""], "--rsh '' is not a command: give the ssh command, e.g. --rsh ssh"),
    ],
)  # fmt: skip
def test_shipping_by_hand_with_bad_options_is_one_line(tmp_path, capsys, args, message) -> None:
    from dse.runtime.launch.ship import main

    assert main([str(tmp_path), *args]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
