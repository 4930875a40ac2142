"""Every command the README and the guides mark as runnable runs as written (tests/docs/runnable.py
says how a block is marked), with the small settings its marker gives.

Each chain of blocks runs in a fresh directory with its own calibration directory, so a
documented ``dse.calibrate`` cannot change what other tests predict. A file named
``model.onnx`` is there from the start: the README's "your own ONNX file" stands for the user's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.docs.runnable import PAGES, ROOT, Chain, chains, on_server, unmarked, with_settings
from tests.helpers.onnx_factory import conv_relu_chain
from tests.helpers.postgres import SYSTEM_USER

#: A command's time limit (s): a documented command that hangs fails instead of the suite.
TIMEOUT_S = 900


def params() -> list:
    out = []
    for chain in chains():
        marks = [getattr(pytest.mark, f) for f in sorted(chain.flags & {"slow", "mpi"})]
        out.append(pytest.param(chain, marks=marks, id=chain.id))
    return out


def test_every_bash_block_is_marked():
    wrong = [w for page in PAGES for w in unmarked(page)]
    assert not wrong, (
        "bash blocks without a marker (<!-- run ... --> or <!-- not run: REASON -->) at: "
        + ", ".join(wrong)
    )


def test_the_readme_has_runnable_commands():
    readme = [c for c in chains() if c.blocks[0].page.name == "README.md"]
    commands = [cmd for c in readme for b in c.blocks for cmd in b.commands]
    # the quick start's tasks: explore, evaluate, your own ONNX file, deploy and measure,
    # calibrate, fidelity, sweep (the emulated cluster needs root: not run here)
    tasks = ("python -m dse +net=", "python -m dse.evaluate", "net.path=model.onnx",
             "phase2.enabled=true", "python -m dse.calibrate", "python -m dse.fidelity",
             "hydra/sweeper=dse_optuna")  # fmt: skip
    for task in tasks:
        assert any(task in c for c in commands), f"the README runs no command with {task}"


@pytest.mark.parametrize("chain", params())
def test_documented_commands_run(chain: Chain, tmp_path: Path, request: pytest.FixtureRequest):
    work = tmp_path / "work"
    work.mkdir()
    onnx.save(conv_relu_chain(), work / "model.onnx")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "DSE_CALIBRATION_DIR": str(tmp_path / "calibration"),
    }
    server = request.getfixturevalue("postgres") if "postgres" in chain.flags else None
    if server is not None:
        (tmp_path / "home").mkdir()
        env.update(
            PGHOST=str(server.socket_dir),
            PGPORT=str(server.port),
            PGUSER=SYSTEM_USER,
            HOME=str(tmp_path / "home"),
        )
    for block in chain.blocks:
        for command in block.commands:
            run = with_settings(command, block.settings)
            if server is not None:
                run = on_server(run, f"127.0.0.1:{server.port}")
            done = subprocess.run(
                ["bash", "-c", run],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            assert done.returncode == 0, f"{block.where}: `{run}` exited {done.returncode}:\n{tail}"
            assert "Traceback" not in done.stderr, f"{block.where}: `{run}` raised:\n{tail}"
