"""A fidelity run's measurements against other predictions: the same mappings predicted again
with another coefficients file, or other cut costs (it measures nothing, so it can run beside
anything).

    python benchmarks/fidelity_repredict.py runs/fidelity/googlenet-edge3_ethernet-*
    python benchmarks/fidelity_repredict.py RUN --coefficients /tmp/refit.json
    python benchmarks/fidelity_repredict.py RUN --transfer-fixed-ms 0,0.2,0.3,0.5

For each run directory of ``python -m dse.fidelity``, the mappings are drawn again as the run
drew them (the same network, platform and number of mappings: ``fidelity.json`` and
``fidelity.csv``; ``--set KEY=VALUE`` for any other setting the run was given, such as
``seed=1``), and the model of the platform's coefficients as they are now (the newest
calibration's) must predict them as the run did, else the script stops (the search, the model
or the calibration changed since: they would not be the run's mappings or predictions). Then
it prints the latency MAPE, the share within 10 %, the period MAPE and the mean latency error
per kind of mapping: as run, with ``--coefficients FILE``, and with every type's
``transfer_fixed_s`` set to each of ``--transfer-fixed-ms`` (everything else as run).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from dse import app
from dse.cli import fail
from dse.config import register
from dse.fidelity.settings import settings_from
from dse.fidelity.statistics import by_kind, stats
from dse.fidelity.workflow import draw
from dse.objectives import OBJECTIVES
from dse.paths import CONF_DIR
from models_analytical.model import Evaluation


def summary(name: str, ev: Evaluation, kinds: list[str], measured, period) -> str:
    """One line: ``ev``'s latency and period against the measured ones (NaN: not measured)."""
    latency = ev.latency_s * 1e3
    lat = stats(latency, measured)
    streamed = ~np.isnan(period)
    per = stats(OBJECTIVES["period"].values(ev)[streamed], period[streamed])
    bias = by_kind(list(zip(latency, measured, kinds, strict=True)))
    return (
        f"  {name:28} latency MAPE {lat['mape_pct']:4.1f} %, within 10 % "
        f"{lat['within_10_pct']:3.0f} %, period MAPE {per['mape_pct']:4.1f} %"
        "  by kind: " + ", ".join(f"{k} {v['bias_pct']:+.1f} %" for k, v in bias.items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of dse.fidelity")
    ap.add_argument("--coefficients", help="another coefficients file to predict with")
    ap.add_argument("--transfer-fixed-ms", default="", help="comma-separated costs per tensor")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE the run was given")
    args = ap.parse_args()
    register()
    fixed = [float(x) for x in args.transfer_fixed_ms.split(",") if x.strip()]
    for run in args.runs:
        if not (run / "fidelity.json").is_file() or not (run / "fidelity.csv").is_file():
            fail(
                f"{run} holds no fidelity.json and fidelity.csv: pass the run directories of "
                "python -m dse.fidelity (runs/fidelity/NET-PLATFORM-DATE)"
            )
        doc = json.loads((run / "fidelity.json").read_text())
        rows = {r["mapping"]: r for r in csv.DictReader((run / "fidelity.csv").open())}
        overrides = [f"+net={doc['net']}", f"platform={doc['platform']}", f"mappings={len(rows)}",
                     *args.set]  # fmt: skip
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("fidelity", overrides)
        s = settings_from(cfg)
        net, _, model = app.model_from(cfg)
        chosen = draw(cfg, net, model, s)
        ok = [i for i, label in enumerate(chosen.labels) if rows[label]["status"] == "ok"]
        mappings = chosen.mappings.take(np.array(ok))
        kinds = [chosen.kinds[i] for i in ok]
        got = [rows[chosen.labels[i]] for i in ok]
        measured = np.array([float(r["latency_measured_ms"]) for r in got])
        period = np.array([float(r.get("period_measured_ms") or "nan") for r in got])
        as_run = np.array([float(r["latency_predicted_ms"]) for r in got])
        ev = model.evaluate(mappings)
        if not np.allclose(ev.latency_s * 1e3, as_run, rtol=1e-3):
            fail(
                f"{run}: the mappings drawn again are not predicted as the run predicted them "
                "(the code or the platform's calibration changed since the run; --set KEY=VALUE "
                "for a setting the run was given)"
            )
        print(f"{run} ({doc['net']}, {len(ok)} mappings measured)")
        print(summary("as run", ev, kinds, measured, period))
        if args.coefficients:
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                other = compose("fidelity", [*overrides, f"coefficients={args.coefficients}"])
            _, _, model2 = app.model_from(other)
            ev2 = model2.evaluate(mappings)
            print(summary(Path(args.coefficients).name, ev2, kinds, measured, period))
        per_byte = float(model.inputs.transfer_per_byte_s[0])
        for f in fixed:
            ev_f = model.with_transfer_costs(f / 1e3, per_byte).evaluate(mappings)
            print(summary(f"{f:g} ms per tensor", ev_f, kinds, measured, period))


if __name__ == "__main__":
    main()
