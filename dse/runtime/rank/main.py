"""A rank's command line: ``python -m mpi4py -m dse.runtime DIR [options]`` measures the
deployment in ``DIR`` (:mod:`dse.runtime.rank.worker`) or, with ``--serve``, serves it
(:mod:`dse.runtime.rank.serving`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dse.errors import DseError
from dse.runtime.rank.serving import serve
from dse.runtime.rank.worker import Stop, measure


def main(argv: list[str] | None = None) -> int:
    """``python -m mpi4py -m dse.runtime DIR [--warmup N] [--iterations N] [--stream N]``:
    0 when the run is measured and its outputs equal the whole model's (with ``--serve``:
    when the application stopped it); else every rank ends
    MPI and exits with status 2, rank 0 having said why in one line (a rank that fails alone
    says why and aborts the others)."""
    parser = argparse.ArgumentParser(prog="python -m mpi4py -m dse.runtime")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--stream", type=int, default=None, help="frames pushed back to back")
    parser.add_argument("--kill-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument(
        "--serve",
        metavar="REQUESTS,RESULTS",
        help="serve frames from the application (dse.runtime.rank.serving) until it stops",
    )
    args = parser.parse_args(argv)
    from mpi4py import MPI  # initialises MPI on import: ranks only

    comm = MPI.COMM_WORLD
    try:
        for name in ("warmup", "iterations", "stream"):
            value, least = getattr(args, name), 1 if name == "iterations" else 0
            if value is not None and not least <= value <= 10**9:
                raise Stop(f"--{name} {value} is out of range [{least}, {10**9}]")
        if args.serve:
            requests, _, results = args.serve.partition(",")
            serve(args.directory, requests, results)
        else:
            measure(args.directory, args.warmup, args.iterations, args.kill_rank, args.stream)
    except Stop as exc:
        if comm.Get_rank() == 0:
            print(f"error: {exc}", file=sys.stderr, flush=True)
        _stop(2)
    except DseError as exc:  # this rank alone: the others would wait for it
        print(f"error: rank {comm.Get_rank()}: {exc}", file=sys.stderr, flush=True)
        comm.Abort(2)
    return 0


def _stop(code: int) -> None:
    """End MPI on this rank and exit with ``code``: every rank does, so no rank aborts the
    others (``python -m mpi4py`` would turn a non-zero ``sys.exit`` into ``MPI_Abort``)."""
    from mpi4py import MPI

    sys.stdout.flush()
    sys.stderr.flush()
    MPI.Finalize()
    os._exit(code)
