"""Where a fidelity run's pipelined period is lost: a reading of runs already measured (it
measures nothing, so it can run beside anything).

    python scripts/fidelity_period.py runs/fidelity/alexnet-edge3_ethernet-*
    python scripts/fidelity_period.py runs/fidelity/*-edge3_ethernet-* --send-ms-per-mb 0.8

For each run directory of ``python -m dse.fidelity ... stream=N`` it splits the measured
mappings in two: those whose predicted period is their predicted latency (the model's cap: a
rank runs one inference's steps before the next one's, so frames back to back are never
faster than one after another) and those predicted to pipeline. For each group it prints the
median of measured period / measured latency (above 1: frames back to back ran slower than one
at a time, which the cap cannot follow) and the median errors of the predicted period and
latency.

``--send-ms-per-mb C`` also prints the period MAPE had every device paid C ms of its own work
per MB it sends, divided by its CPU share (from the run's platform file, ``emulation:``; 1
without one): the what-if of a term that charges a transfer's CPU work to its sender. It adds
that work to the device's predicted compute (its busy time) and keeps the predicted latency,
and with it the cap: an estimate, not a bound. A real term would also lengthen the latencies
of mappings where the sender computes next, raise their cap, and change what calibration
fits to the cut costs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from dse.cluster import parse_spec
from dse.paths import CONF_DIR


def shares(run: Path) -> dict[str, float]:
    """Each device's CPU share on the run's platform (``fidelity.json``'s ``platform``, its
    file's ``emulation:``); empty for a platform without one."""
    name = json.loads((run / "fidelity.json").read_text())["platform"]
    cfg = yaml.safe_load((CONF_DIR / "platform" / f"{name}.yaml").read_text())
    if not cfg.get("emulation"):
        return {}
    return {d.name: d.share for d in parse_spec(cfg).devices}


def comparisons(run: Path) -> list[dict]:
    """The run's measured mappings that streamed (status ok, with a period)."""
    out = []
    # a fidelity run deploys into deployments/ (before 2026-12-07: phase2/)
    for path in sorted(
        [*run.glob("deployments/*/comparison.json"), *run.glob("phase2/*/comparison.json")]
    ):
        c = json.loads(path.read_text())
        if c.get("status") == "ok" and c.get("stream"):
            out.append(c)
    return out


def with_send_cost(c: dict, ms_per_mb: float, share: dict[str, float]) -> float:
    """The predicted period (ms) had each device also worked ``ms_per_mb`` / its ``share``
    per MB it sends; never above the predicted latency (the model's cap)."""
    pred = c["predicted"]
    period = pred["objectives"]["period_ms"]
    for device, compute in pred["compute_ms"].items():
        extra = ms_per_mb / share.get(device, 1.0) * pred["bytes_sent"].get(device, 0) / 1e6
        period = max(period, compute + extra)
    return min(period, pred["latency_ms"])


def group(rows: list[dict]) -> str:
    if not rows:
        return "none"
    ratio = [c["stream"]["period_ms"] / c["latency_ms"]["median"] for c in rows]
    period = [
        c["predicted"]["objectives"]["period_ms"] / c["stream"]["period_ms"] - 1 for c in rows
    ]
    latency = [c["predicted"]["latency_ms"] / c["latency_ms"]["median"] - 1 for c in rows]
    return (
        f"{len(rows):2d} mappings, measured period / latency {np.median(ratio):.3f} "
        f"({min(ratio):.2f}-{max(ratio):.2f}), period error {100 * np.median(period):+.1f} %, "
        f"latency error {100 * np.median(latency):+.1f} % (medians)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="fidelity run directories")
    ap.add_argument("--send-ms-per-mb", type=float, default=None, metavar="C")
    args = ap.parse_args(argv)
    for run in args.runs:
        rows = comparisons(run)
        if not rows:
            print(f"{run}: no mapping measured with stream=N; skipped", file=sys.stderr)
            continue
        capped = [
            c for c in rows
            if c["predicted"]["objectives"]["period_ms"] >= 0.99 * c["predicted"]["latency_ms"]
        ]  # fmt: skip
        piped = [c for c in rows if c not in capped]
        measured = np.array([c["stream"]["period_ms"] for c in rows])
        predicted = np.array([c["predicted"]["objectives"]["period_ms"] for c in rows])
        print(f"{run.name}: period MAPE {100 * np.mean(abs(predicted / measured - 1)):.1f} %")
        print(f"  predicted period = latency: {group(capped)}")
        print(f"  predicted to pipeline:      {group(piped)}")
        if args.send_ms_per_mb is not None:
            share = shares(run)
            what_if = np.array([with_send_cost(c, args.send_ms_per_mb, share) for c in rows])
            mape = 100 * np.mean(abs(what_if / measured - 1))
            print(f"  with {args.send_ms_per_mb} ms/MB sent charged to the sender: {mape:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
