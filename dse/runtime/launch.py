"""Run a deployment directory under mpiexec with a time limit; no process outlives it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from dse.errors import DseError
from dse.runtime.package import command, mpiexec_path, read_plan

#: Open MPI refuses to run as root without these.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: A rank blocked in a receive yields its core instead of spinning on it: on a busy machine a
#: spinning rank took the core from the work it was waiting for (2x slower runs); idle, the
#: core has nothing else to run and the wait is as short.
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def session_processes(sid: int) -> list[int]:
    """Pids of the live processes of session ``sid`` (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        # fields: state, ppid, pgrp, session, ...
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_session(sid: int, grace_s: float = 3.0) -> None:
    """SIGTERM then SIGKILL to every process of session ``sid`` (mpiexec and its ranks: Open
    MPI gives each rank its own process group, but they stay in mpiexec's session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_processes(sid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and session_processes(sid):
            time.sleep(0.05)


def launch(
    directory: Path,
    timeout_s: float = 600.0,
    warmup: int | None = None,
    iterations: int | None = None,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """Run the deployment; its ``measurements.json``, or ``{"status": "failed", "reason"}``
    (exit code and the last lines of stderr, or the time limit). Ctrl-C stops every rank."""
    directory = Path(directory).absolute()
    plan = read_plan(directory)
    cmd = command(directory, len(plan["ranks"]), warmup, iterations, mpiexec_path(), extra)
    result_path = directory / "measurements.json"
    result_path.unlink(missing_ok=True)
    env = {**os.environ, **MPI_ENV, **(ROOT_ENV if os.geteuid() == 0 else {})}
    err_path = directory / "stderr.log"
    with open(err_path, "wb") as err, open(directory / "stdout.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            proc.wait()
            return {"status": "failed", "reason": f"timed out after {timeout_s:g} s"}
        except BaseException:
            kill_session(proc.pid)
            proc.wait()
            raise
        finally:
            kill_session(proc.pid, grace_s=1.0)  # nothing of this run outlives it
    if code != 0 or not result_path.is_file():
        tail = _tail(err_path)
        return {"status": "failed", "reason": f"mpiexec exited with {code}: {tail}"}
    try:
        return json.loads(result_path.read_text())
    except json.JSONDecodeError as exc:
        raise DseError(f"{result_path} is not valid JSON: {exc}") from None


def _tail(path: Path, lines: int = 4) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no stderr"
    keep = [t.strip() for t in text if t.strip() and not set(t.strip()) <= set("-=*")]
    return " | ".join(keep[-lines:]) or "no stderr"
