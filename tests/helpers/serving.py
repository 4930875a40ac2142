"""Served deployments in tests: the ranks' processes, and the whole model's outputs to compare
with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

#: Partitioned outputs equal the whole model's to max|a - b| <= RTOL * max|b| (issue 74).
RTOL = 1e-5


def rank_pids(directory: Path) -> dict[int, int]:
    """The pid of each live rank serving the deployment at ``directory``, by rank."""
    found = {}
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dse.runtime" in cmd and str(directory).encode() in cmd and b"--serve" in cmd:
            for var in env:
                if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                    found[int(var.split(b"=", 1)[1])] = int(p.name)
    return found


class Whole:
    """The whole model in plain onnxruntime (none of dse's settings): its outputs by name."""

    def __init__(self, path: Path) -> None:
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.session.run(self.names, inputs), strict=True))


def assert_same(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    """``got`` has ``ref``'s outputs, each equal to it within :data:`RTOL`."""
    assert set(got) == set(ref)
    for name, r in ref.items():
        assert got[name].shape == r.shape, name
        assert np.abs(got[name] - r).max() <= RTOL * np.abs(r).max(), name
