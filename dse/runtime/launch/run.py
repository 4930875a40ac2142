"""Run a deployment directory under mpiexec with a time limit; no process outlives it, nor
the launching process (:mod:`dse.lifetime`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from dse.config import TIMEOUT_S
from dse.errors import DseError
from dse.files import owned, why_unwritable
from dse.lifetime import die_with_parent
from dse.runtime.measurements import MEASUREMENTS, Measurement, failed, read_measurements
from dse.runtime.mpirun import Launcher
from dse.runtime.reader import read_plan

# What Open MPI prints (on stderr or stdout) when its launcher failed to start before any rank
# ran, for a cause that does not last: a run that ends with one of these is started again
# (RETRIES times). The PMIx server's listener of mpiexec failed 30 ms into one run of a CI run's
# test suite (an emulated cluster's; not reproduced since), and the next deployment's launch
# worked. A board's daemon failed to report back (exit status 213, on stdout) in one of 90
# deployments of a Wi-Fi cluster's fidelity run, and the next deployment's launch worked.
STARTUP_FAILURES = (
    "The PMIx server's listener thread failed to start",
    "A daemon failed to report back after being spawned",
)
RETRIES = 2
RETRY_PAUSE_S = 0.5

R = TypeVar("R")


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
    timeout_s: float = TIMEOUT_S,
    warmup: int | None = None,
    iterations: int | None = None,
    rank_args: Sequence[str] = (),
    launcher: Launcher | None = None,
) -> Measurement:
    """Run the deployment; the measurement its rank 0 wrote (``failed`` with its reason when
    the outputs differ from the whole model's), or a failure naming the exit status and the
    ranks' error line (or the last lines of stderr), or the time limit. The plan is checked
    first (one line, :func:`dse.runtime.plan.read_plan`). Ctrl-C stops every rank. The
    launcher's watch (:data:`dse.runtime.mpirun.Watch`) sees the run start and end, and may
    name a failure's cause."""
    directory = Path(directory).absolute()
    plan = read_plan(directory)
    launcher = launcher or Launcher()
    check_session_folder(launcher)
    placement = [(r.host, r.device) for r in plan.ranks]
    cmd = launcher.command(
        directory, len(plan.ranks), warmup, iterations, rank_args, placement=placement
    )
    # one run of a deployment at a time; the launcher's watch around it
    with owned(directory, "deployment"), launcher.watched(placement) as finish:
        try:
            result = _run_retrying(cmd, directory, timeout_s, launcher)
        except BaseException:
            finish(failed("interrupted"))  # nothing of the run stays behind
            raise
        return finish(result)


def check_session_folder(launcher: Launcher) -> None:
    """Open MPI keeps its session files in the temporary folder (``TMPDIR``, else /tmp): one
    that cannot be written is one line before mpiexec fails with a page of its own."""
    folder = Path(launcher.environment().get("TMPDIR") or "/tmp")
    why = why_unwritable(folder)
    if why is not None:
        raise DseError(
            f"mpiexec needs a temporary folder it can write, and TMPDIR={folder} is not "
            f"({why}): set TMPDIR to another folder"
        )


def _run_retrying(
    cmd: list[str], directory: Path, timeout_s: float, launcher: Launcher
) -> Measurement:
    """:func:`_run`, :func:`started_again` while it fails at startup; a failure after the
    retries says how many launches failed."""
    result = started_again(
        lambda: _run(cmd, directory, timeout_s, launcher),
        lambda r: r.get("status") != "ok" and _failed_at_startup(directory),
    )
    if result.get("status") != "ok" and _failed_at_startup(directory):
        return {**result, "reason": f"{result['reason']} ({RETRIES + 1} launches)"}
    return result


def started_again(attempt: Callable[[], R], failed_at_startup: Callable[[R], bool]) -> R:
    """What ``attempt()`` (an mpiexec run) returns, after running it again, at most
    :data:`RETRIES` more times :data:`RETRY_PAUSE_S` apart, while ``failed_at_startup`` says
    it failed at startup (:func:`startup_failure` of its output)."""
    for i in range(RETRIES + 1):
        result = attempt()
        if i == RETRIES or not failed_at_startup(result):
            break
        time.sleep(RETRY_PAUSE_S)
    return result


def _failed_at_startup(directory: Path) -> bool:
    """Whether no rank wrote a measurement in ``directory`` and mpiexec's stderr or stdout
    there names a startup failure that does not last."""
    return not (directory / MEASUREMENTS).is_file() and _startup_named(directory) is not None


def _startup_named(directory: Path) -> str | None:
    """The startup failure that does not last (:func:`startup_message`) mpiexec's stderr or
    stdout in ``directory`` names, and which of them: the first that names one."""
    for name in ("stderr.log", "stdout.log"):
        message = startup_message(_read(directory / name))
        if message is not None:
            return f"{message} (Open MPI, in {name})"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def captured(cmd: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """mpiexec ``cmd`` run to its end with its output captured as text, dying with this
    process, at most ``timeout_s`` (else :class:`subprocess.TimeoutExpired`); run again after a
    startup failure that does not last (:func:`started_again`)."""
    return started_again(
        lambda: subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            preexec_fn=die_with_parent(),  # mpiexec dies with this process
        ),
        process_failed_at_startup,
    )


def process_failed_at_startup(proc: subprocess.CompletedProcess) -> bool:
    """Whether a finished mpiexec (run with its output captured as text) failed at startup."""
    return proc.returncode != 0 and startup_failure(f"{proc.stderr}\n{proc.stdout}")


def startup_failure(output: str) -> bool:
    """Whether mpiexec's ``output`` names a startup failure that does not last."""
    return startup_message(output) is not None


def startup_message(output: str) -> str | None:
    """The startup failure that does not last (:data:`STARTUP_FAILURES`) mpiexec's ``output``
    names, if any (Open MPI breaks its lines anywhere)."""
    text = " ".join(output.split())
    return next((message for message in STARTUP_FAILURES if message in text), None)


def _run(cmd: list[str], directory: Path, timeout_s: float, launcher: Launcher) -> Measurement:
    """mpiexec ``cmd`` in its own session, at most ``timeout_s``; what the run gave."""
    result_path = directory / MEASUREMENTS
    result_path.unlink(missing_ok=True)
    err_path = directory / "stderr.log"
    with open(err_path, "wb") as err, open(directory / "stdout.log", "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=err,
            env=launcher.environment(),
            start_new_session=True,
            preexec_fn=die_with_parent(),  # and if this process is killed outright, with it
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            proc.wait()
            return failed(f"timed out after {timeout_s:g} s")
        except BaseException:
            kill_session(proc.pid)
            proc.wait()
            raise
        finally:
            kill_session(proc.pid, grace_s=1.0)  # nothing of this run outlives it
    if result_path.is_file():
        result = read_measurements(directory)
        if code == 0 or result["status"] != "ok":
            return result
    return failed(f"mpiexec exited with {code}: {_why(directory)}")


def _why(directory: Path) -> str:
    """What mpiexec said: a startup failure it names (:data:`STARTUP_FAILURES`, on stderr or
    stdout, where Open MPI prints some of them), else its stderr's lines (:func:`_tail`), else
    its stdout's."""
    return (
        _startup_named(directory)
        or _tail(directory / "stderr.log")
        or _tail(directory / "stdout.log")
        or "no output"
    )


def _tail(path: Path, lines: int = 4) -> str:
    """The ranks' own error lines, else the last lines of ``path`` (banners left out); empty
    for a file without any."""
    text = _read(path).strip().splitlines()
    keep = [t.strip() for t in text if t.strip() and not set(t.strip()) <= set("-=*")]
    ours = [t for t in keep if t.startswith("error: ")]
    return " | ".join(ours[:lines] or keep[-lines:])
