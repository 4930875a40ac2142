"""Where the tests find ``mpiexec``: the venv's Open MPI, else PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

_VENV_MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIEXEC: str | None = str(_VENV_MPIEXEC) if _VENV_MPIEXEC.is_file() else shutil.which("mpiexec")


def flaky_mpiexec(tmp_path: Path, failures: int) -> str:
    """An mpiexec that fails as Open MPI's does when its PMIx listener cannot start, the first
    ``failures`` times it is called, then runs the real one."""
    script = tmp_path / "flaky-mpiexec"
    count = tmp_path / "launches"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        f'if [ "$n" -lt {failures} ]; then\n'
        "  echo ------------------------------------------------- >&2\n"
        '  echo "The PMIx server\'s listener thread failed to start. We cannot" >&2\n'
        "  echo continue. >&2\n"
        "  exit 213\n"
        "fi\n"
        f'exec {MPIEXEC} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)
