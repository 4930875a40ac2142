"""`python -m dse.compare RUN_DIR [RUN_DIR ...] [-o comparison.png]`: the convergence of several
runs of one problem overlaid, like the thesis's Figures 12-14.

A multirun or sweep directory (``runs/multirun/<date>/<time>``) stands for its numbered runs;
files among the arguments (``multirun.yaml``, a plot: what ``DIR/*`` lists) are left out.
Runs are labelled by the settings that differ between them (encoding, splits, seed, ...). Runs
of different networks, platforms, coefficients or objectives measure different things and are
refused; the hypervolume of runs of one problem shares one normalisation, so they compare. A
directory without a complete summary (a run still going, or killed) is skipped with a warning.
The plot goes beside the runs (their common parent) unless -o says otherwise.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import os
from pathlib import Path

from dse.cli import fail, say, stopped_cleanly
from dse.errors import DseError
from dse.results.compare import expand, labels, read, same_problem
from dse.results.plots import plot_convergence
from dse.usage import parser


def main(argv: list[str] | None = None) -> None:
    ap = parser("compare")
    ap.add_argument("runs", nargs="+", type=Path, help="run directories, or a multirun/sweep")
    ap.add_argument("-o", "--output", type=Path, default=None, help="the figure (PNG)")
    args = ap.parse_args(argv)
    if args.output is not None and args.output.is_dir():
        fail(
            f"-o {args.output} is a directory: give the figure's file, "
            f"-o {args.output / 'comparison.png'}"
        )
    found = [(run, r) for run in expand(args.runs) if (r := read(run)) is not None]
    if not found:
        fail("no complete run directory among the arguments")
    try:
        same_problem(found)
    except DseError as exc:
        fail(str(exc))
    first = found[0][1][0]
    names = labels([s for _, (s, _) in found])
    runs = {}
    for name, (run, (summary, history)) in zip(names, found, strict=True):
        runs[name] = history
        last = history[-1]
        say(
            f"{name}: "
            + ", ".join(f"best {o} {last[f'best_{o}']:.4g}" for o in summary["objectives"])
            + f", hypervolume {last['hypervolume']:.4f} after {int(last['evaluations'])} "
            f"evaluations ({run})"
        )
    parent = Path(os.path.commonpath([str(r.resolve()) for r, _ in found]))
    output = args.output or (parent if parent.is_dir() else parent.parent) / "comparison.png"
    title = f"{first['net']} on {first['platform']}: {len(runs)} runs"
    try:
        plot_convergence(output, runs, first["objectives"], title)
    except DseError as exc:
        fail(str(exc))
    say(f"wrote {output}")


if __name__ == "__main__":
    stopped_cleanly(main)
