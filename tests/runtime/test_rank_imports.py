"""What a rank imports: the runtime's worker, and not the search's libraries.

A rank's memory at start is the baseline every fitted memory figure sits on. When the worker
imported ``dse.net`` (through ``dse.config``'s zoo names and the equivalence check's deployment
helpers), every rank loaded numba and llvmlite; llvmlite's library alone put 36-88 MB of file
pages into a rank's start, as many as the page cache happened to map, and calibrations on one
machine started their ranks up to 78 MB apart (docs/results/cluster.md).
"""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.cli import ROOT

#: Modules a rank must not load: the search's and the model's (numba, llvmlite, scipy), the
#: network zoo and Hydra (a rank reads its measurement defaults from ``dse.config``).
NOT_IN_A_RANK = ("numba", "llvmlite", "scipy", "dse.net", "hydra")


def test_a_rank_imports_none_of_the_search_libraries() -> None:
    code = (
        "import sys, dse.runtime.rank.worker\n"
        f"print(' '.join(m for m in {NOT_IN_A_RANK!r} if m in sys.modules))\n"
        "print('onnxruntime' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["", "True"], out
