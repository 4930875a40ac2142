"""The thesis's two comparisons at its settings (population 1000, 100 generations), 5 seeds each.

    python benchmarks/thesis_comparisons.py [--nets alexnet vgg16 densenet121] [--seeds 5]
        [--out runs/thesis] [--summarize-only]

1. Naive (one gene per device, Eq. 4.5) against advanced with 2, 4 and 6 splits, on the
   CPU+GPU cluster (jetson_xavier_nx_x8) and the CPU-only one (xavier_cpu_only_x8): the
   thesis's Figures 12-13 and its claim that the advanced encoding converges to better fronts.
2. Vertical split points against hybrid (advanced, 2 splits) on CPU+GPU: Figure 14 and the
   claim that hybrid partitioning finds better trade-offs than vertical partitioning alone.

Split layers get equal parts, as in the thesis (``chromosome.shares=equal``). Every run of
one network and platform shares one hypervolume normalisation (fixed reference
mappings, dse/search/hypervolume.py), so the table's mean +- sd compare across encodings.
Prints a Markdown table and writes it to OUT/table.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = {"CPU+GPU": "jetson_xavier_nx_x8", "CPU only": "xavier_cpu_only_x8"}
EQUAL = "chromosome.shares=equal"  # a split layer's parts are equal, as in the thesis
ENCODINGS = [  # label, overrides, platforms
    ("naive", ["chromosome=naive", EQUAL], list(PLATFORMS)),
    ("advanced-2", ["chromosome=advanced", "chromosome.splits=2", EQUAL], list(PLATFORMS)),
    ("advanced-4", ["chromosome=advanced", "chromosome.splits=4", EQUAL], list(PLATFORMS)),
    ("advanced-6", ["chromosome=advanced", "chromosome.splits=6", EQUAL], list(PLATFORMS)),
    ("vertical", ["chromosome=vertical"], ["CPU+GPU"]),
]


def launch(out: Path, net: str, label: str, overrides: list[str], platform: str, seeds: int):
    target = out / net / platform / label
    if all((target / str(s) / "summary.json").exists() for s in range(seeds)):
        return
    seed_list = ",".join(str(s) for s in range(seeds))
    cmd = [sys.executable, "-m", "dse", "--multirun", f"+net={net}", *overrides]
    cmd += [f"platform={platform}", f"seed={seed_list}", "progress=false"]
    cmd += [f"hydra.sweep.dir={target}", "hydra.sweep.subdir=${seed}"]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)


def summarize(out: Path, nets: list[str]) -> str:
    rows = defaultdict(list)
    for summary_path in sorted(out.glob("*/*/*/*/summary.json")):
        s = json.loads(summary_path.read_text())
        net, platform, label = summary_path.parts[-5:-2]
        rows[net, platform, label].append(s)
    lines = [
        "| network | platform | encoding | hypervolume | best latency (ms) | best memory (MB) "
        "| best energy (J) | runs |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def ms(values: list[float]) -> str:
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.4g} ± {sd:.2g}"

    for net in nets:
        for pname, platform in PLATFORMS.items():
            for label, _, plats in ENCODINGS:
                runs = rows.get((net, platform, label))
                if not runs or pname not in plats:
                    continue
                best = {o: [r["best"][o][o] for r in runs] for o in ("latency", "memory", "energy")}
                lines.append(
                    f"| {net} | {pname} | {label} | {ms([r['hypervolume'] for r in runs])} | "
                    f"{ms(best['latency'])} | {ms(best['memory'])} | {ms(best['energy'])} | "
                    f"{len(runs)} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["alexnet", "vgg16", "densenet121"])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "thesis")
    ap.add_argument("--summarize-only", action="store_true")
    args = ap.parse_args()
    if not args.summarize_only:
        for net in args.nets:
            for label, overrides, plats in ENCODINGS:
                for pname in plats:
                    launch(args.out, net, label, overrides, PLATFORMS[pname], args.seeds)
    table = summarize(args.out, args.nets)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
