"""Where the tests find ``mpiexec``: the venv's Open MPI, else PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

_VENV_MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIEXEC: str | None = str(_VENV_MPIEXEC) if _VENV_MPIEXEC.is_file() else shutil.which("mpiexec")


#: What Open MPI prints when a launch fails at startup (mpiexec's words, shortened): its PMIx
#: listener cannot start (on stderr), or a board's daemon did not report back (on stdout).
STARTUP_MESSAGES = {
    "pmix": (
        "  echo ------------------------------------------------- >&2\n"
        '  echo "The PMIx server\'s listener thread failed to start. We cannot" >&2\n'
        "  echo continue. >&2\n"
    ),
    "daemon": (
        "  echo ------------------------------------------------------------\n"
        '  echo "A daemon failed to report back after being spawned. This could"\n'
        '  echo "be due to several factors, including inability to find the"\n'
        '  echo "  Remote host:   edge0"\n'
        '  echo "  Daemon exit status: 213"\n'
        '  echo "check that any firewall (e.g., iptables) has been disabled and"\n'
        '  echo "try again."\n'
    ),
}


def flaky_mpiexec(tmp_path: Path, failures: int, message: str = "pmix") -> str:
    """An mpiexec that fails as Open MPI's does at startup (:data:`STARTUP_MESSAGES`), the
    first ``failures`` times it is called, then runs the real one."""
    script = tmp_path / "flaky-mpiexec"
    count = tmp_path / "launches"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        f'if [ "$n" -lt {failures} ]; then\n' + STARTUP_MESSAGES[message] + "  exit 213\n"
        "fi\n"
        f'exec {MPIEXEC} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)
