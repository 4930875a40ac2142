"""Calibrate, then measure the model's fidelity on the zoo and on a network left out of
calibration; print one table (run on a quiet machine: it measures).

    python scripts/fidelity_zoo.py              # ~55 min on localhost, into runs/fidelity_zoo
    python scripts/fidelity_zoo.py --out DIR --skip-calibrate --nets alexnet   # reuse, one net
    python scripts/fidelity_zoo.py --out DIR --rounds 3   # quicker, noisier medians
    python scripts/fidelity_zoo.py --out DIR --platform edge3_ethernet --stream 8
        --calibrate-arg quick=true --nets mobilenetv2 --mappings 6 --held-out ''  # a smoke run

An emulated platform (``edge3_ethernet``, ``edge3_wifi``) needs its cluster up first
(``python -m dse.cluster up platform=NAME``); ``--stream N`` also measures the pipelined period
(N frames back to back) and prints its MAPE.

Steps (each a plain command, printed before it runs):
1. ``python -m dse.calibrate platform=P`` (every zoo net) into the platform's calibration file;
2. ``python -m dse.fidelity +net=NET platform=P mappings=N`` for each of ``--nets``;
3. ``python -m dse.calibrate platform=P nets=[all but HELD] out=DIR/heldout.json`` and
   ``python -m dse.fidelity +net=HELD coefficients=DIR/heldout.json``.
A step whose output already exists is skipped, so the script resumes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ("alexnet", "vgg16", "resnet50", "densenet121", "mobilenetv2", "googlenet")


def sh(args: list[str]) -> None:
    print("+", shlex.join(args), flush=True)
    subprocess.run(args, check=True)


def period_mape(f: dict) -> str:
    """The pipelined period's MAPE (%) of a fidelity.json, or '-' where not measured."""
    period = f.get("period") or {}
    return "-" if period.get("mape_pct") is None else f"{period['mape_pct']:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "fidelity_zoo")
    ap.add_argument("--platform", default="localhost")
    ap.add_argument("--nets", nargs="+", default=["alexnet", "vgg16", "resnet50", "densenet121"])
    ap.add_argument("--held-out", default="googlenet")
    ap.add_argument("--mappings", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="dse.fidelity's interleaved rounds")
    ap.add_argument("--skip-calibrate", action="store_true")
    ap.add_argument("--stream", type=int, default=0, help="frames for the pipelined period")
    ap.add_argument(
        "--calibrate-arg", action="append", default=[], help="an override for dse.calibrate"
    )
    a = ap.parse_args()
    py = [sys.executable, "-m"]
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.skip_calibrate:
        sh([*py, "dse.calibrate", f"platform={a.platform}", *a.calibrate_arg])
    runs = []
    for net in a.nets:
        d = a.out / net
        if not (d / "fidelity.json").is_file():
            sh(
                [
                    *py,
                    "dse.fidelity",
                    f"+net={net}",
                    f"platform={a.platform}",
                    f"mappings={a.mappings}",
                    f"rounds={a.rounds}",
                    f"stream={a.stream}",
                    f"out={d}",
                ]
            )
        runs.append((net, d))
    if a.held_out:
        coeff = a.out / "heldout.json"
        if not coeff.is_file():
            rest = ",".join(n for n in ZOO if n != a.held_out)
            sh([*py, "dse.calibrate", f"platform={a.platform}", f"nets=[{rest}]", f"out={coeff}",
                *a.calibrate_arg])  # fmt: skip
        d = a.out / f"{a.held_out}-heldout"
        if not (d / "fidelity.json").is_file():
            sh(
                [
                    *py,
                    "dse.fidelity",
                    f"+net={a.held_out}",
                    f"platform={a.platform}",
                    f"mappings={a.mappings}",
                    f"rounds={a.rounds}",
                    f"stream={a.stream}",
                    f"coefficients={coeff}",
                    f"out={d}",
                ]
            )
        runs.append((f"{a.held_out} (held out)", d))
    print()
    print(
        f"{'network':<22} {'n':>3} {'lat MAPE %':>10} {'within 10 %':>11} {'spearman':>8} "
        f"{'kendall':>7} {'mem MAPE %':>10} {'mem within 10 %':>15} {'period MAPE %':>13} "
        "| as measured: lat MAPE %, "
        "within 10 %, spearman | machine vs reference | repeatability: spearman, within 10 %"
    )
    for name, d in runs:
        f = json.loads((d / "fidelity.json").read_text())
        lat, mem = f["latency"], f["memory"]
        raw, speed = f.get("latency_as_measured") or lat, f.get("drift")
        rep = f.get("repeatability_adjusted") or f.get("repeatability")
        print(
            f"{name:<22} {lat['n']:>3} {lat['mape_pct']:>10.1f} {lat['within_10_pct']:>11.0f} "
            f"{lat['spearman']:>8.3f} {lat['kendall']:>7.3f} {mem['mape_pct']:>10.1f} "
            f"{mem['within_10_pct']:>15.0f} {period_mape(f):>13} "
            f"| {raw['mape_pct']:.1f}, {raw['within_10_pct']:.0f}, "
            f"{raw['spearman']:.3f} | "
            + (f"{speed['slower_pct']:+.1f} % ({speed['reference']})" if speed else "not probed")
            + " | "
            + (
                f"{rep['spearman_round_vs_round']:.3f}, {rep['round_within_10_pct']:.0f} %"
                if rep
                else "-"
            )
        )
    print(
        "(lat: with the machine's drift taken out where probed, dse.runtime.launch.probe; "
        "repeatability likewise)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
