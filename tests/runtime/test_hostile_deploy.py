"""Hostile settings of a deploy, each one line with exit status 2 before any work: an out=
that cannot be written or that mpiexec cannot take (a colon or comma in its path), a time
limit that is no limit, a negative stream, a split mapping without its horizontal.json;
mpiexec's temporary folder that cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.errors import DseError
from dse.mapping import to_autodice
from dse.runtime.launch.mpiexec import Launcher, check_session_folder
from tests.helpers.hostile import assert_each_one_line, run_all
from tests.helpers.nets import aba_batch, on_devices, zoo_like


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
