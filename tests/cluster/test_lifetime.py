"""On an emulated cluster, a deploy killed outright leaves nothing on the boards: mpiexec dies
with it (:mod:`dse.lifetime`) and Open MPI's daemons on the boards, started through the
cluster's launcher in the boards' namespaces, take their ranks down when they lose mpiexec."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dse.cluster.state import State
from dse.mapping import to_autodice
from tests.helpers.cli import ROOT
from tests.helpers.cluster import edge3_up, left_on_boards, wait_for_ranks
from tests.helpers.nets import on_devices, small_net


@pytest.fixture(scope="module")
def edge3(cluster_names) -> tuple[dict, State]:
    """edge3_ethernet as shipped, up under a name of its own (platform.name=...)."""
    return edge3_up(cluster_names("life"))


@pytest.mark.mpi
@pytest.mark.slow
def test_a_killed_deploy_leaves_nothing_on_the_boards(edge3, tmp_path: Path) -> None:
    cfg, state = edge3
    net = small_net(tmp_path)
    batch = on_devices(net, 3, [[0], [0], [1], [1], [0]])
    mapping, _ = to_autodice(net.graph, [d["name"] for d in cfg["devices"]], batch)
    (tmp_path / "mapping.json").write_text(json.dumps(mapping))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dse.deploy", "+net=onnx", f"net.path={tmp_path / 'small.onnx'}",
         "platform=edge3_ethernet", f"platform.name={state.name}",
         f"mapping={tmp_path / 'mapping.json'}", f"out={tmp_path / 'dep'}", "measure=true",
         "warmup=0", "iterations=100000000", "timeout_s=600"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert wait_for_ranks(state, "edge1", 240), proc.poll() or "no rank on edge1"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while left_on_boards(state) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left_on_boards(state) == []
