"""`python -m dse.fidelity +net=NET platform=P [mappings=30]`: how well the model predicts runs.

Deploys and measures N mappings under MPI: the per-objective bests of a short search and points
spread along its front, then random mappings of every kind (one device, vertical cuts, every
splittable layer split, mixed). Reports predicted against measured latency and per-device peak
memory (the rank's peak RSS over its life, loading included): MAPE, share within +-10 %,
Spearman and Kendall rank correlation. Writes ``fidelity.csv``, ``fidelity.png`` and
``fidelity.json``; the last line printed is the summary.
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from dse import app
from dse.cli import CONF_DIR, guarded, run, say
from dse.config import Phase2Config
from dse.errors import DseError
from dse.mapping import RANDOM_KINDS, Mappings, random_mappings

KINDS = ("front", *RANDOM_KINDS)
WITHIN = 10.0  # %


def stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE (%), share of points within +-10 % (%), Spearman and Kendall rank correlation."""
    from scipy.stats import kendalltau, spearmanr

    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    err = np.abs(p - m) / m * 100.0
    ok = len(p) > 2 and np.ptp(p) > 0 and np.ptp(m) > 0
    return {
        "n": int(len(p)),
        "mape_pct": float(err.mean()) if len(p) else float("nan"),
        "within_10_pct": float((err <= WITHIN).mean() * 100.0) if len(p) else float("nan"),
        "spearman": float(spearmanr(p, m).statistic) if ok else float("nan"),
        "kendall": float(kendalltau(p, m).statistic) if ok else float("nan"),
    }


def choose(cfg: DictConfig, net, model, n: int, seed: int) -> tuple[Mappings, list, list]:
    """The mappings to measure, their labels and kinds (at most ``n``, distinct)."""
    from dse.runtime.phase2 import select
    from dse.search import nsga2
    from dse.search.problem import MappingProblem

    graph, n_dev = net.graph, len(model.platform.devices)
    problem = MappingProblem(app.chromosome_from(cfg, net, model), model, cfg.objectives)
    settings = OmegaConf.to_object(cfg.algorithm)
    settings.pop_size, settings.n_gen, settings.max_evaluations = 100, 30, None
    state = nsga2.run(nsga2.new_search(problem, settings, seed))
    genes, F, _ = nsga2.front(state)
    picks = select(F, list(problem.objectives), max(n // 3 - len(problem.objectives), 0))
    batches = [problem.chromosome.decode(np.asarray(genes)[[i for i, _ in picks]])]
    labels = [lab for _, lab in picks]
    kinds = ["front"] * len(picks)
    rng = np.random.default_rng(seed)
    rest = max(n - len(picks), 0)
    per_kind = {k: rest // 4 + (1 if i < rest % 4 else 0) for i, k in enumerate(KINDS[1:])}
    per_kind["single"] = min(per_kind["single"], n_dev)
    per_kind["mixed"] += rest - sum(per_kind.values())
    for kind, count in per_kind.items():
        batches.append(random_mappings(graph, n_dev, kind, count, rng))
        labels += [f"{kind}_{i}" for i in range(count)]
        kinds += [kind] * count
    for _ in range(10):  # copies (a random mapping equal to another) are replaced by mixed ones
        mappings = Mappings.concat(batches)
        _, first = np.unique(mappings.keys(), return_index=True)
        keep = np.sort(first)
        if len(keep) >= n:
            break
        more = n - len(keep)
        batches.append(random_mappings(graph, n_dev, "mixed", more, rng))
        labels += [f"mixed_{per_kind['mixed'] + i}" for i in range(more)]
        kinds += ["mixed"] * more
        per_kind["mixed"] += more
    keep = keep[:n]
    return mappings.take(keep), [labels[i] for i in keep], [kinds[i] for i in keep]


def points(rows: list[dict[str, Any]], kinds: list[str]) -> dict[str, Any]:
    """(predicted, measured, kind) per mapping for latency (``latency_adjusted``: with the
    machine's drift taken out, where probed) and per used device for memory."""
    lat, adj, mem = [], [], []
    for row, kind in zip(rows, kinds, strict=True):
        if row["status"] != "ok":
            continue
        lat.append((row["latency_predicted_ms"], row["latency_measured_ms"], kind))
        if row.get("latency_adjusted_ms") is not None:
            adj.append((row["latency_predicted_ms"], row["latency_adjusted_ms"], kind))
        for key, value in row.items():
            if key.endswith("_memory_mb_predicted") and value:
                measured = row[key.replace("_predicted", "_measured")]
                if measured:
                    mem.append((value, measured, kind))
    return {"latency": lat, "latency_adjusted": adj if len(adj) == len(lat) else [], "memory": mem}


def noise_floor(directory: Path) -> float | None:
    """Median over the measured runs of half their p10-p90 latency spread (% of the median)."""
    spreads = []
    for f in Path(directory).glob("*/measurements.json"):
        lat = json.loads(f.read_text()).get("latency_ms") or {}
        if lat.get("median"):
            spreads.append((lat["p90"] - lat["p10"]) / 2 / lat["median"] * 100.0)
    return round(float(np.median(spreads)), 2) if spreads else None


def by_kind(points: list[tuple[float, float, str]]) -> dict[str, dict[str, float]]:
    """Per kind of mapping: how many, the mean signed error (bias) and MAPE of latency, %."""
    out = {}
    for kind in KINDS:
        err = [(p - m) / m * 100.0 for p, m, k in points if k == kind]
        if err:
            out[kind] = {
                "n": len(err),
                "bias_pct": round(float(np.mean(err)), 2),
                "mape_pct": round(float(np.mean(np.abs(err))), 2),
            }
    return out


def round_spread(directory: Path) -> float | None:
    """Median over the mappings of (max - min) / median of their rounds' medians, %."""
    spreads = []
    for f in Path(directory).glob("*/measurements.json"):
        lat = json.loads(f.read_text()).get("latency_ms") or {}
        if lat.get("round_spread") is not None:
            spreads.append(lat["round_spread"] * 100.0)
    return round(float(np.median(spreads)), 2) if spreads else None


def repeatability(directory: Path, adjusted: bool = False) -> dict[str, float] | None:
    """How well the measurements agree with themselves, the finest a model can be checked:
    the Spearman correlation of one round's latencies with another's over the mappings
    (median over pairs of rounds), and the share of (mapping, round) whose round median lies
    within ±10 % of the median of that mapping's other rounds, %. ``adjusted``: the rounds
    with the machine's drift taken out (``latency_ms.drift``). None with fewer than 2 rounds
    or 3 mappings."""
    from itertools import combinations

    from scipy.stats import spearmanr

    rounds = []
    for f in sorted(Path(directory).glob("*/measurements.json")):
        lat = json.loads(f.read_text()).get("latency_ms") or {}
        rounds.append(
            (lat.get("drift") or {}).get("rounds_adjusted_ms") or []
            if adjusted
            else lat.get("rounds_ms") or []
        )
    n = min((len(r) for r in rounds), default=0)
    if n < 2 or len(rounds) < 3:
        return None
    r = np.array([x[:n] for x in rounds], dtype=np.float64)  # [mappings, rounds]
    pairs = [spearmanr(r[:, i], r[:, j]).statistic for i, j in combinations(range(n), 2)]
    within = [
        np.abs(r[:, i] / np.median(np.delete(r, i, axis=1), axis=1) - 1.0) <= 0.10 for i in range(n)
    ]
    return {
        "spearman_round_vs_round": round(float(np.median(pairs)), 3),
        "round_within_10_pct": round(float(np.mean(within)) * 100.0, 1),
    }


def speed_reference(model, net) -> float | None:  # noqa: ANN001 - AnalyticalModel, Net
    """The calibration's speed probe of this network (ms): only for the same network (its
    fingerprint) probed at the same thread count."""
    from dse.runtime.probe import probe_threads

    ref = model.coefficients.notes.get("speed_reference") or {}
    if ref.get("threads") != probe_threads(model.platform):
        return None
    if (ref.get("fingerprints") or {}).get(net.name) != net.fingerprint:
        return None
    value = (ref.get("whole_ms") or {}).get(net.name)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def measure(
    out, net, platform, model, mappings, labels, settings, cfg, bar
) -> tuple[list[dict[str, Any]], bool, dict[str, Any] | None]:
    """Deploy every mapping into ``out/phase2/<label>``, then run them all ``cfg.rounds`` times,
    each round in a new random order (a slow spell of the machine then hits one round of
    every mapping instead of every round of one); each mapping's merged measurements with the
    prediction beside them, written to its ``measurements.json``, whether Ctrl-C cut the
    rounds short, and (with ``probe``) the machine's speed drift: each run is brought to the
    calibration's probe of the network, or without one to this run's median probe
    (:mod:`dse.runtime.probe`). Sub-models are deleted at the end unless ``keep=true``."""
    from dse.files import write_text
    from dse.runtime.measure import (
        check_gpus,
        deploy,
        measure_interleaved,
        probe_times,
        take_out_drift,
        with_prediction,
    )
    from dse.runtime.phase2 import drop_submodels
    from dse.runtime.probe import speed_probe

    dirs: list[tuple[int, Path]] = []
    results: dict[int, dict[str, Any]] = {}
    interrupted = False
    try:
        for p, label in enumerate(labels):
            d = out / "phase2" / label
            try:
                check_gpus(platform, mappings.take(p))
                deploy(
                    net,
                    platform,
                    mappings.take(p),
                    d,
                    int(cfg.seed),
                    settings.warmup,
                    settings.iterations,
                )
                dirs.append((p, d))
            except DseError as exc:
                results[p] = {"status": "failed", "reason": str(exc)}
            bar.update(1)
        probe = speed_probe(dirs[0][1], platform) if cfg.probe and dirs else None
        merged, interrupted = measure_interleaved(
            [d for _, d in dirs],
            int(cfg.rounds),
            settings.warmup,
            settings.iterations,
            settings.timeout_s,
            np.random.default_rng(int(cfg.seed)),
            lambda _r, _i: bar.update(1),
            probe,
        )
        probes = probe_times(merged)
        speed = None
        if probes:
            now = round(float(np.median(probes)), 3)
            reference = speed_reference(model, net)
            speed = {
                "probe_ms": now,
                "reference_ms": round(reference, 3) if reference else now,
                "reference": "calibration" if reference else "this run's median probe",
            }
            speed["slower_pct"] = round((now / speed["reference_ms"] - 1) * 100, 2)
        for (p, d), result in zip(dirs, merged, strict=True):
            if result.get("status") == "ok":
                if speed is not None:
                    result = take_out_drift(result, speed["reference_ms"])
                result = with_prediction(result, model, mappings.take(p))
            write_text(d / "measurements.json", json.dumps(result, indent=1))
            results[p] = result
    finally:
        if not cfg.keep:
            for _, d in dirs:
                drop_submodels(d)
    return [results[p] for p in range(len(labels))], interrupted, speed


def plot(path: Path, pts: dict[str, Any], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    adjusted = bool(pts.get("latency_adjusted"))
    for ax, (name, unit) in zip(axes, (("latency", "ms"), ("memory", "MB")), strict=True):
        data = pts["latency_adjusted"] if name == "latency" and adjusted else pts[name]
        if not data:
            ax.set_title(f"{name}: nothing measured")
            continue
        p = np.array([d[0] for d in data], dtype=float)
        m = np.array([d[1] for d in data], dtype=float)
        # where each latency was before the machine's drift came out of it
        raw = np.array([d[1] for d in pts["latency"]]) if name == "latency" and adjusted else m
        lo, hi = min(p.min(), m.min(), raw.min()) * 0.8, max(p.max(), m.max(), raw.max()) * 1.25
        x = np.geomspace(lo, hi, 50)
        ax.plot(x, x, "k-", lw=1, label="y = x")
        ax.fill_between(x, x / 1.1, x * 1.1, color="0.85", label="+-10 %")
        if raw is not m:
            ax.scatter(raw, p, s=14, marker="x", color="0.6", lw=0.8, label="as measured")
        for kind in KINDS:
            sel = [i for i, d in enumerate(data) if d[2] == kind]
            if sel:
                ax.scatter(m[sel], p[sel], s=22, label=kind)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        s = stats(p, m)
        ax.set_title(
            f"{name} ({unit}): MAPE {s['mape_pct']:.1f} %, {s['within_10_pct']:.0f} % within "
            f"10 %, Spearman {s['spearman']:.2f}",
            fontsize=9,
        )
        what = " (machine's drift taken out)" if name == "latency" and adjusted else ""
        ax.set_xlabel(f"measured {name} ({unit}){what}")
        ax.set_ylabel(f"predicted {name} ({unit})")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@hydra.main(config_path=str(CONF_DIR), config_name="fidelity", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    from dse.runtime.package import mpiexec_path
    from dse.runtime.phase2 import _row
    from dse.runtime.phase2 import write_csv as write_rows

    if int(cfg.mappings) < 1:
        raise DseError(f"mappings={cfg.mappings} must be at least 1")
    mpiexec_path()
    started = time.perf_counter()
    net, platform, model = app.model_from(cfg)
    if not model.coefficients.calibrated:
        say(
            f"warning: coefficients {model.coefficients.source} are not calibrated: run "
            f"python -m dse.calibrate platform={platform.name} first",
            error=True,
        )
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out = Path(str(cfg.out or f"fidelity/{net.name}-{platform.name}-{stamp}")).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    mappings, labels, kinds = choose(cfg, net, model, int(cfg.mappings), int(cfg.seed))
    say(f"measuring {len(labels)} mappings of {net.name} on {platform.name} into {out}")
    settings = Phase2Config(
        warmup=int(cfg.warmup), iterations=int(cfg.iterations), timeout_s=float(cfg.timeout_s)
    )
    from tqdm import tqdm

    rows: list[dict[str, Any]] = []
    rounds = int(cfg.rounds)
    bar = tqdm(total=len(labels) * (rounds + 1), desc="fidelity", unit="run")
    results, interrupted, speed = measure(
        out, net, platform, model, mappings, labels, settings, cfg, bar
    )
    bar.close()
    for label, kind, result in zip(labels, kinds, results, strict=True):
        row = _row(label, result)
        row["kind"] = kind
        rows.append(row)
    write_rows(out / "fidelity.csv", rows)
    pts = points(rows, kinds)
    if not pts["latency"]:
        raise DseError(f"no mapping was measured (see {out}/phase2/*/stderr.log)")
    raw = stats([x[0] for x in pts["latency"]], [x[1] for x in pts["latency"]])
    raw["by_kind"] = by_kind(pts["latency"])
    # the figures judged: with the machine's drift taken out where it was probed
    judged = pts["latency_adjusted"] or pts["latency"]
    lat = stats([x[0] for x in judged], [x[1] for x in judged])
    lat["by_kind"] = by_kind(judged)
    lat["drift_taken_out"] = bool(pts["latency_adjusted"])
    mem = stats([x[0] for x in pts["memory"]], [x[1] for x in pts["memory"]])
    calibrated = "calibrated" if model.coefficients.calibrated else "NOT calibrated"
    plot(
        out / "fidelity.png",
        pts,
        f"{net.name} on {platform.name}: predicted vs measured, {len(pts['latency'])} "
        f"mappings ({calibrated} coefficients {model.coefficients.source})",
    )
    failed = [r["mapping"] for r in rows if r["status"] != "ok"]
    noise = noise_floor(out / "phase2")
    spread = round_spread(out / "phase2")
    repeat = repeatability(out / "phase2")
    repeat_adjusted = repeatability(out / "phase2", adjusted=True)
    doc = {
        "net": net.name,
        "platform": platform.name,
        "coefficients": model.coefficients.source,
        "calibrated": model.coefficients.calibrated,
        "latency": lat,
        "latency_as_measured": raw,
        "drift": speed,
        "memory": mem,
        "failed": failed,
        "warmup": settings.warmup,
        "iterations": settings.iterations,
        "rounds": rounds,
        "seconds": round(time.perf_counter() - started, 1),
        "energy": "not measured (no counter readable here); modelled only",
        "noise_floor_pct": noise,
        "round_spread_pct": spread,
        "repeatability": repeat,
        "repeatability_adjusted": repeat_adjusted,
        "interrupted": interrupted,
    }
    (out / "fidelity.json").write_text(json.dumps(doc, indent=1))
    if interrupted:
        raise KeyboardInterrupt
    if failed:
        say(f"{len(failed)} mapping(s) failed: {', '.join(failed[:5])} (see {out}/phase2)")
    say(f"wrote {out / 'fidelity.csv'}, {out / 'fidelity.png'} in {doc['seconds']:.0f} s")
    if noise is not None:
        say(
            f"noise floor: half the p10-p90 spread of a mapping's iterations is {noise:.1f} % "
            "of its median"
            + (
                f"; its {rounds} rounds' medians differ by {spread:.1f} % (median over mappings)"
                if spread is not None and rounds > 1
                else ""
            )
        )
    for name, rep in (("as measured", repeat), ("drift taken out", repeat_adjusted)):
        if rep is not None:
            say(
                f"repeatability {name} (the finest check these measurements allow): one round "
                f"against another, spearman {rep['spearman_round_vs_round']:.2f}; a round "
                f"within 10 % of the mapping's other rounds {rep['round_within_10_pct']:.0f} %"
            )
    if lat["drift_taken_out"]:
        if speed["reference"] == "calibration":
            how = (
                f"the machine ran {abs(speed['slower_pct']):.1f} % "
                f"{'slower' if speed['slower_pct'] >= 0 else 'faster'} than at calibration "
                f"(the whole network alone: {speed['probe_ms']:.1f} ms against "
                f"{speed['reference_ms']:.1f} ms then)"
            )
        else:
            how = (
                "calibration did not probe this network: runs are brought to this run's median "
                f"speed (the whole network alone: {speed['probe_ms']:.1f} ms)"
            )
        say(
            f"{how}; as measured, latency MAPE {raw['mape_pct']:.1f} %, within 10 % "
            f"{raw['within_10_pct']:.0f} %, spearman {raw['spearman']:.2f}; the figures below "
            "(by kind and the summary) take the drift out of every run"
        )
    say(
        "latency error by kind of mapping"
        + (" (drift taken out)" if lat["drift_taken_out"] else "")
        + " (mean, +: predicted slower): "
        + ", ".join(f"{k} {v['bias_pct']:+.1f} % (n={v['n']})" for k, v in lat["by_kind"].items())
    )
    say(
        f"fidelity {net.name}: latency MAPE {lat['mape_pct']:.1f} %, within 10 % "
        f"{lat['within_10_pct']:.0f} %, spearman {lat['spearman']:.2f}; memory MAPE "
        f"{mem['mape_pct']:.1f} %"
    )
    return {"status": "ok", "out": str(out), "latency": lat, "memory": mem}


if __name__ == "__main__":
    run(main, "fidelity")
