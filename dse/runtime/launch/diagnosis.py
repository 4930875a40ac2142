"""What mpiexec's output says of a run that failed: a startup failure that does not last (the
run is started again), a host ssh could not reach (named, with its ranks), or the ranks' own
error lines. It reads the logs a run leaves in its deployment directory
(:data:`~dse.runtime.deployment.layout.STDOUT`, ``STDERR``) or a finished process's output.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from dse.errors import DseError
from dse.runtime.deployment.hosts import rankfile_hosts
from dse.runtime.deployment.layout import HOSTFILE, MEASUREMENTS, STDERR, STDOUT

#: What Open MPI prints (on stderr or stdout) when its launcher failed to start before any rank
#: ran, for a cause that does not last (its PMIx server's listener thread, a board's daemon
#: that did not report back): a run that ends with one of these is started again (RETRIES
#: times); a launch right after such a failure has been seen to work.
STARTUP_FAILURES = (
    "The PMIx server's listener thread failed to start",
    "A daemon failed to report back after being spawned",
)
#: What ssh says (in mpiexec's output) of a host it could not reach: the host, then why. Such a
#: failure lasts: it is named, not started again.
UNREACHED = re.compile(
    r"ssh: (?:Could not resolve hostname (\S+?)|connect to host (\S+) port \d+): ([^\n]+)"
)


def failed_at_startup(directory: Path) -> bool:
    """Whether no rank wrote a measurement in ``directory`` and mpiexec's stderr or stdout
    there names a startup failure that does not last."""
    if (directory / MEASUREMENTS).is_file() or unreached(directory) is not None:
        return False
    return startup_named(directory) is not None


def unreached(directory: Path) -> str | None:
    """The host ssh could not reach (:data:`UNREACHED`), with the ranks the rankfile of
    ``directory`` places there and what to check; None when mpiexec's output names none."""
    for name in (STDERR, STDOUT):
        m = UNREACHED.search(read_log(directory / name))
        if m is None:
            continue
        host, why = m.group(1) or m.group(2), m.group(3).strip()
        why = f"its name does not resolve here ({why})" if m.group(1) else f"ssh: {why}"
        try:
            ranks = [r for r, h in sorted(rankfile_hosts(directory).items()) if h == host]
        except DseError:
            ranks = []
        on = f" (ranks {', '.join(map(str, ranks))})" if ranks else ""
        return (
            f"host '{host}'{on} could not be reached: {why}: check the host names in "
            f"{directory / HOSTFILE} and that the board is up and reachable from here"
        )
    return None


def startup_named(directory: Path) -> str | None:
    """The startup failure that does not last (:func:`startup_message`) mpiexec's stderr or
    stdout in ``directory`` names, and which of them: the first that names one."""
    for name in (STDERR, STDOUT):
        message = startup_message(read_log(directory / name))
        if message is not None:
            return f"{message} (Open MPI, in {name})"
    return None


def read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


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


def why(directory: Path) -> str:
    """What mpiexec said: a host ssh could not reach (:func:`unreached`), a startup failure it
    names (:data:`STARTUP_FAILURES`, on stderr or stdout, where Open MPI prints some of them),
    else its stderr's lines (:func:`tail`), else its stdout's."""
    return (
        unreached(directory)
        or startup_named(directory)
        or tail(directory / STDERR)
        or tail(directory / STDOUT)
        or "no output"
    )


#: How Open MPI names a rank that ended (by its number; the node by its own host name).
ENDED = re.compile(r"process rank (\d+)")


def ended_rank(text: str) -> int | None:
    """The rank mpiexec's output ``text`` says ended (killed, failed), if it names one."""
    named = ENDED.search(text)
    return int(named.group(1)) if named else None


def tail(path: Path, lines: int = 4) -> str:
    """The ranks' own error lines, else the last lines of ``path`` (banners left out); empty
    for a file without any."""
    text = read_log(path).strip().splitlines()
    keep = [t.strip() for t in text if t.strip() and not set(t.strip()) <= set("-=*")]
    ours = [t for t in keep if t.startswith("error: ")]
    return " | ".join(ours[:lines] or keep[-lines:])
