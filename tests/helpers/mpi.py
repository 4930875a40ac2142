"""Where the tests find ``mpiexec``: the venv's Open MPI, else PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

_VENV_MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIEXEC: str | None = str(_VENV_MPIEXEC) if _VENV_MPIEXEC.is_file() else shutil.which("mpiexec")
