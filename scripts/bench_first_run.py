"""What a first run costs beyond a later one: numba compiling the kernels into an empty cache.

    python scripts/bench_first_run.py [--rounds 2] [--checkout DIR ...] [-- ARGS...]

Runs ``python -m dse ARGS`` (default: ``+net=vgg16 chromosome=advanced``, the README's first
command) in fresh processes, each round once with an empty numba cache (``NUMBA_CACHE_DIR`` a
new temporary directory: what a fresh clone meets) and once more with the cache that run left,
and prints for each the wall time and the CPU time of the process and its children (user +
system). The difference, cold minus warm, is the one-time compilation. CPU time is the figure
to compare on a loaded machine (wall time there measures the other load); with several
``--checkout`` directories (source trees of dse, e.g. a ``git archive`` of another commit) the
runs alternate between them, round by round. Outputs go to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ARGS = ["+net=vgg16", "chromosome=advanced"]


def run_once(checkout: Path, args: list[str], cache: Path, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``python -m dse ARGS`` run in ``checkout`` with numba's cache
    in ``cache``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "dse", *args, f"hydra.run.dir={out}", "progress=false"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed in {checkout}:\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--checkout", type=Path, action="append", help="a dse source tree")
    ap.add_argument("args", nargs="*", help="arguments of python -m dse (after --)")
    opts = ap.parse_args()
    checkouts = opts.checkout or [Path(__file__).resolve().parent.parent]
    args = opts.args or DEFAULT_ARGS
    figures: dict[tuple[Path, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="dse-first-run-") as tmp:
        for r in range(opts.rounds):
            for i, checkout in enumerate(checkouts):
                cache = Path(tmp) / f"cache-{r}-{i}"
                for kind in ("cold", "warm"):
                    wall, cpu = run_once(checkout, args, cache, Path(tmp) / f"run-{r}-{i}-{kind}")
                    figures.setdefault((checkout, kind), []).append((wall, cpu))
                    print(f"round {r + 1} {checkout} {kind}: wall {wall:.1f} s, cpu {cpu:.1f} s")
    print(f"\npython -m dse {' '.join(args)}; medians over {opts.rounds} rounds")
    for checkout in checkouts:
        med = {
            kind: [statistics.median(x[j] for x in figures[checkout, kind]) for j in (0, 1)]
            for kind in ("cold", "warm")
        }
        (cw, cc), (ww, wc) = med["cold"], med["warm"]
        print(
            f"{checkout}: cold wall {cw:.1f} s cpu {cc:.1f} s; warm wall {ww:.1f} s cpu "
            f"{wc:.1f} s; first-run extra: wall {cw - ww:.1f} s, cpu {cc - wc:.1f} s"
        )


if __name__ == "__main__":
    main()
