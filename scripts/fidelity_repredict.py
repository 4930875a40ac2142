"""A fidelity run's measurements against other predictions: the same mappings predicted again
with another coefficients file, or other cut costs (it measures nothing, so it can run beside
anything).

    python scripts/fidelity_repredict.py runs/fidelity/googlenet-edge3_ethernet-*
    python scripts/fidelity_repredict.py RUN --coefficients /tmp/refit.json
    python scripts/fidelity_repredict.py RUN --transfer-fixed-ms 0,0.2,0.3,0.5

For each run directory of ``python -m dse.fidelity``, the mappings are drawn again as the run
drew them (the same network, platform and number of mappings: ``fidelity.json`` and
``fidelity.csv``; ``--set KEY=VALUE`` for any other setting the run was given, such as
``seed=1``), and the model of the platform's coefficients as they are now (the newest
calibration's) must predict them as the run did, else the script stops (the search, the model
or the calibration changed since: they would not be the run's mappings or predictions). Then
it prints the latency MAPE, the share within 10 %, Spearman's rank correlation, the period
MAPE and the mean latency error per kind of mapping: as run, with ``--coefficients FILE``, and
with every type's ``transfer_fixed_s`` set to each of ``--transfer-fixed-ms`` (everything else
as run).

With ``--drift``, each of those is judged four ways where the run probed the machine's speed
(``dse.runtime.launch.probe``): as measured; each round brought to the reference by its own probe,
the devices' work scaled and transfers kept (the model's slowdown of the mapping, what
``dse.fidelity`` reports); each round wholly scaled by its probe (the rule before
2026-12-03); and every round wholly by one factor, the reference over the run's median probe
(the drift between calibration and the run only). The reference is the coefficients'
``speed_reference`` for the network, else the one the run took from the calibrated networks,
else the run's median probe.
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from dse import app
from dse.cli import fail
from dse.config import register
from dse.fidelity.measure import DEPLOYMENTS
from dse.fidelity.settings import settings_from
from dse.fidelity.statistics import by_kind, stats
from dse.fidelity.workflow import draw
from dse.mapping import Mappings
from dse.measuring.comparison import read_comparison
from dse.measuring.rounds import Slowdown, scaled_rounds, whole
from dse.measuring.speed import slowdown, speed_reference
from dse.net import Net
from dse.objectives import OBJECTIVES
from dse.paths import CONF_DIR
from models_analytical.model import AnalyticalModel, Evaluation


def summary(name: str, ev: Evaluation, kinds: list[str], measured, period) -> str:
    """One line: ``ev``'s latency and period against the measured ones (NaN: not measured)."""
    latency = ev.latency_s * 1e3
    lat = stats(latency, measured)
    streamed = ~np.isnan(period)
    per = stats(OBJECTIVES["period"].values(ev)[streamed], period[streamed])
    bias = by_kind(list(zip(latency, measured, kinds, strict=True)))

    def num(x: float | None, fmt: str) -> str:
        return "n/a" if x is None else format(x, fmt)

    return (
        f"  {name:40} latency MAPE {num(lat.mape_pct, '4.1f')} %, within 10 % "
        f"{num(lat.within_10_pct, '3.0f')} %, spearman {num(lat.spearman, '.2f')}, "
        f"period MAPE {num(per.mape_pct, '4.1f')} %  by kind: "
        + ", ".join(f"{k} {v.bias_pct:+.1f} %" for k, v in bias.items())
    )


def drift_rules(run: Path, labels: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per mapping in ``labels`` its rounds' latencies and periods (NaN without a stream), and
    the probe beside each round, from the run's ``comparison.json`` files."""
    lat, per, probes = [], [], []
    # a run of this dse deployed into deployments/, an older one into phase2/
    where = run / DEPLOYMENTS if (run / DEPLOYMENTS).is_dir() else run / "phase2"
    for label in labels:
        c = read_comparison(where / label)
        rounds = c.latency
        if not rounds.rounds_probe_ms:
            fail(f"{where}/{label} was not probed: --drift needs a run with probe=true")
        lat.append(np.array(rounds.rounds_ms))
        streamed = c.stream.rounds_ms if c.stream is not None else []
        per.append(np.array(streamed or [np.nan] * len(lat[-1])))
        probes.append(np.array(rounds.rounds_probe_ms))
    return {"lat": lat, "per": per, "probes": probes}


def run_probe(rounds: dict) -> float:
    """The run's median probe: the machine's speed over the whole run."""
    return float(np.median(np.concatenate(rounds["probes"])))


def judged(
    rounds: dict, reference: float, slowdowns: list[Slowdown]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(latencies, periods) as measured; per round by its probe, by each mapping's slowdown
    (as dse.fidelity takes it out, :func:`dse.measuring.rounds.scaled_rounds`) and wholly; and
    wholly by the run's median probe."""
    whole_run = run_probe(rounds)

    def work(r, p, s, which):  # noqa: ANN001, ANN202
        return scaled_rounds(r, p, reference, s, which).median_adjusted

    rules = {
        "as measured": lambda r, p, s, w: np.median(r),
        "drift out of the work per round": work,
        "drift out wholly per round": lambda r, p, s, w: work(r, p, whole, w),
        "drift out wholly by run median": lambda r, p, s, w: np.median(r) * reference / whole_run,
    }
    return {
        name: tuple(
            np.array(
                [
                    rule(r, p, s, which)
                    for r, p, s in zip(rounds[k], rounds["probes"], slowdowns, strict=True)
                ]
            )
            for which, k in enumerate(("lat", "per"))
        )
        for name, rule in rules.items()
    }


@dataclass(frozen=True)
class Judge:
    """Prints a model's predictions against the run's measurements: as the CSV has them, or
    under each drift rule (:func:`judged`) where ``rounds`` are given."""

    net: Net
    mappings: Mappings
    kinds: list[str]
    measured: np.ndarray
    period: np.ndarray
    rounds: dict | None
    held_out_ms: float | None = None  # the run's reference from the calibrated networks

    def show(self, name: str, ev: Evaluation, model: AnalyticalModel, own: bool = True) -> None:
        if self.rounds is None:
            print(summary(name, ev, self.kinds, self.measured, self.period))
            return
        # the coefficients' probe of this network, as dse.fidelity takes it; for a network
        # held out of the run's own calibration, the speed the calibrated networks' probes
        # gave it; else the run's median probe
        reference = speed_reference(model, self.net)
        if reference is None and own and self.held_out_ms is not None:
            reference = self.held_out_ms
        if reference is None:
            reference = run_probe(self.rounds)
        slowdowns = [slowdown(model, self.mappings.take(i)) for i in range(len(self.kinds))]
        for rule, (lat, per) in judged(self.rounds, reference, slowdowns).items():
            print(summary(f"{name}, {rule}", ev, self.kinds, lat, per))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of dse.fidelity")
    ap.add_argument("--coefficients", help="another coefficients file to predict with")
    ap.add_argument("--transfer-fixed-ms", default="", help="comma-separated costs per tensor")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE the run was given")
    ap.add_argument("--drift", action="store_true", help="judge with and without the drift")
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
        rounds = drift_rules(run, [chosen.labels[i] for i in ok]) if args.drift else None
        speed = doc.get("drift") or {}
        held_out = (
            speed.get("reference_ms") if speed.get("reference") == "calibrated networks" else None
        )
        judge = Judge(net, mappings, kinds, measured, period, rounds, held_out)
        judge.show("as run", ev, model)
        if args.coefficients:
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                other = compose("fidelity", [*overrides, f"coefficients={args.coefficients}"])
            _, _, model2 = app.model_from(other)
            judge.show(Path(args.coefficients).name, model2.evaluate(mappings), model2, own=False)
        per_byte = float(model.inputs.transfer_per_byte_s[0])
        same_host = float(model.inputs.transfer_per_byte_same_host_s[0])
        for f in fixed:
            ev_f = model.with_transfer_costs(f / 1e3, per_byte, same_host).evaluate(mappings)
            print(summary(f"{f:g} ms per tensor", ev_f, kinds, measured, period))


if __name__ == "__main__":
    main()
