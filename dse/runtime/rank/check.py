"""``python -m dse.runtime.rank.check DIR``: check a deployment (its plan, sub-models and expected
outputs, :func:`dse.runtime.deployment.reader.read_plan`; the hosts of its hostfile and rankfile,
:func:`dse.runtime.deployment.hosts.check_hosts`) before any rank starts; ``run.sh`` runs it
first. Status 0 when it holds, else 2 with one line saying what is wrong."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dse.errors import DseError
from dse.runtime.deployment.hosts import check_hosts
from dse.runtime.deployment.reader import read_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.runtime.rank.check")
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        check_hosts(read_plan(args.directory), args.directory)
    except DseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
