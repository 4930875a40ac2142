"""``mpiexec -n K python -m mpi4py -m dse.runtime DIR``: one rank of a deployment."""

from __future__ import annotations

import sys

from dse.runtime.rank.main import main

if __name__ == "__main__":
    sys.exit(main())
