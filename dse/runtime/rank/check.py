"""``python -m dse.runtime.check DIR``: check a deployment (its plan, sub-models and expected
outputs, :func:`dse.runtime.reader.read_plan`) before any rank starts; ``run.sh`` runs it
first. Status 0 when it holds, else 2 with one line saying what is wrong."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dse.errors import DseError
from dse.runtime.reader import read_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.runtime.check")
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        read_plan(args.directory)
    except DseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
