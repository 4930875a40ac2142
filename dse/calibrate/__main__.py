"""`python -m dse.calibrate platform=P [nets=[...]] [quick=true] [out=FILE]`: calibrate the model.

Steps, per device kind of the platform (at the thread count of its first device):

1. **compute**: each calibration network runs whole under onnxruntime's profiler; its kernels
   are mapped back to layers (:mod:`dse.calibrate.profile`) and scaled so they add up to the
   whole run. A layer's time is kept under its :func:`~models_analytical.layer_costs.layer_key`
   (any network with the same layer reuses it), and a linear model per layer family is fitted
   for layers never profiled;
2. **channel shares**: one-Conv models with 4 to 256 output channels give the channel block;
   then every splittable Conv and fully connected layer of the calibration networks runs
   alone, whole and as parts of about 1/4, 1/2 and 3/4 of its channels (whole blocks): what a
   part pays whatever its channels, as a share of the layer (``part_fixed``, its input's
   transform: 30-45 % for DenseNet-121's 32-channel 3x3 convolutions, 3 % for VGG-16's), and
   per layer family that share x output channels for layers never timed;
3. **links**: ping-pong and two-way exchanges between two ranks of each link class, by size;
4. **deployments**: per network, one device, a vertical cut, a split of every splittable
   layer over two devices and a random mix, run under MPI by the runtime: the ranks' peak RSS
   while loading and running give the memory terms; each network's layer times are anchored
   to its one-device run; a network's mappings run in interleaved rounds (``rounds``, each in
   a random order) and each keeps the median of its rounds' medians. The first network also
   runs whole on a device other than the entry, whose rank then only sends the image: the
   memory of a rank that runs no sub-model;
5. **sub-models**: the cut mappings' sub-models, each timed alone in this process beside the
   whole network, give what running work as sub-models costs on a device beyond its layers
   (per sub-model, per byte in and out) and how much slower split layers' parts are
   (:mod:`dse.calibrate.submodels`); a device then receives by copying the data in, as the
   runtime's ranks do;
6. **shared host**: the cut mappings' ranks compute slower than the model says, against the
   one-device run of the same rounds, while another device of their host has work (shared
   caches and memory bandwidth, a waiting rank polling): the median is the model's
   ``shared_host_factor``;
7. **cuts**: what the cut mappings' latencies still show is charged per tensor crossing
   devices (fixed and per byte: the runtime's probe, receive and send calls);
8. **energy** is not measured here (no counter on most machines): the power figures stay those
   of the platform's file, and the coefficients say so.

Each figure's spread (p90 - p10 over median) and the machine's load during the run are kept in
the file's ``provenance``; a network whose whole-run spread exceeds 15 % is profiled again.
"""

from __future__ import annotations

import datetime
import json
import os
import platform as pyplatform
import tempfile
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig

from dse import app
from dse.cli import CONF_DIR, guarded, run, say
from dse.errors import DseError
from dse.mapping import Mappings, from_devices, random_mappings, remap, whole
from dse.net import load_net, zoo
from dse.net.graph import LayerGraph
from dse.platform import Platform
from dse.runtime.measure import measured_latency_ms
from models_analytical.coefficients import Coefficients, load_coefficients
from models_analytical.layer_costs import family, layer_key, regression_terms
from models_analytical.model import AnalyticalModel

MB = 1e6
#: A network profiled with a larger whole-run spread than this is profiled once more.
CONTAMINATED = 0.15


def base_coefficients(cfg: DictConfig, platform: Platform) -> Coefficients:
    """The platform's own (uncalibrated) file: the starting point and the power figures."""
    cfg2 = cfg.copy()
    cfg2.coefficients = "platform"
    return load_coefficients(app.coefficients_path(cfg2))


LABELS = ("single", "vertical", "split", "mixed")
#: The first network's extra mapping: whole on ``b``, so the entry device ``a`` runs nothing.
ENTRY_ONLY = "entry-only"


def calibration_mappings(
    graph: LayerGraph, times: np.ndarray, a: int, b: int, n_dev: int, entry_only: bool = False
) -> Mappings:
    """One device; a vertical cut at half the time; every splittable layer over two devices;
    each layer on a random one of the two (a third of the splittable ones split): many cuts
    (:data:`LABELS`); with ``entry_only``, then the whole network on ``b`` (:data:`ENTRY_ONLY`;
    ``a`` must be the entry device)."""
    n = len(graph)
    on = np.zeros((3, n, n_dev), dtype=bool)
    on[0, :, a] = True
    cut = int(np.searchsorted(np.cumsum(times), times.sum() / 2))
    cut = min(max(cut, 1), n - 1)
    on[1, :cut, a] = True
    on[1, cut:, b] = True
    on[2, :, a] = True
    on[2, :, b] = graph.splittable & (graph.out_channels >= 2)
    rng = np.random.default_rng(12345)
    batches = [
        from_devices(graph, on),
        remap(random_mappings(graph, 2, "mixed", 1, rng), [a, b], n_dev),
    ]
    if entry_only:
        batches.append(whole(graph, n_dev, np.full(n, b)))
    return Mappings.concat(batches)


class Steps:
    """A progress bar over the calibration's steps (stderr), one tick per unit of work."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc="calibrate", unit="step", leave=True)

    def tick(self, what: str, n: int = 1) -> None:
        self.bar.set_postfix_str(what, refresh=False)
        self.bar.update(n)


def machine_state() -> dict[str, Any]:
    return {
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpu_s": round(time.process_time(), 2),
        "wall": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def calibrate_kind(
    cfg: DictConfig, platform: Platform, kind: str, base: Coefficients, steps: Steps
) -> tuple[dict[str, Any], dict[str, Any], dict[str, list]]:
    """Profiles, regression, channel block and parts' fixed shares for one device kind:
    (coefficients, provenance, the profiled layers' samples)."""
    from dse.calibrate.channels import measure_channel_scaling, measure_part_costs
    from dse.calibrate.profile import profile_model
    from models_analytical.calibration import (
        fit_channel_block,
        fit_part_fixed,
        fit_regression,
    )

    dev = next(d for d in platform.devices if d.kind == kind)
    if kind == "gpu":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise DseError(
                f"platform '{platform.name}' has gpu devices but onnxruntime has no CUDA here: "
                "run dse.calibrate on the board (with onnxruntime-gpu)"
            )
        raise DseError("profiling gpu devices is not supported yet: calibrate the cpu kinds")
    runs = 3 if cfg.quick else int(cfg.runs)
    layer_s: dict[str, float] = {}
    fams, terms, secs, nets_of = [], [], [], []
    nets_prov = {}
    prior_model = base[kind]
    for name in list(cfg.nets)[: 1 if cfg.quick else None]:
        net = load_net({"name": name})
        g = net.graph
        per_class = np.array([prior_model.layer[c] for c in ("conv", "fc", "elementwise")])
        prior = g.macs / (prior_model.frequency_hz * per_class.mean()) + g.output_bytes / 1e10
        path = zoo.materialize(name, int(cfg.seed))
        for attempt in range(2):
            before = machine_state()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            prof = profile_model(path, g, prior, dev.threads, warmup=2, runs=runs)
            # below 1 / threads, this process did not get its cores: other work ran beside it
            cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
            whole = np.median(prof.whole_s)
            spread = float(np.percentile(prof.whole_s, 90) - np.percentile(prof.whole_s, 10))
            spread /= whole
            if spread <= CONTAMINATED or attempt == 1:
                break
        scaled = prof.layer_s * (whole / max(prof.layer_s.sum(), 1e-12))
        for layer, t in zip(g, scaled, strict=True):
            key = layer_key(layer)
            layer_s.setdefault(key, float(t))
            nets_of.append(name)
            fams.append(family(layer))
            terms.append(regression_terms(layer))
            secs.append(float(t))
        nets_prov[name] = {
            "whole_ms": round(whole * 1e3, 3),
            "whole_spread": round(spread, 4),
            "kernels_per_run": prof.kernels,
            "layout_kernels_attached": list(prof.unmapped),
            "profiled_again": attempt == 1,
            "cpu_over_wall": round(cpu_share, 3),
            "machine_before": before,
            "machine_after": machine_state(),
        }
        steps.tick(f"profiled {name} ({whole * 1e3:.1f} ms)")
    regression = fit_regression(fams, np.array(terms), np.array(secs))
    rows = measure_channel_scaling(dev.threads, repeats=4 if cfg.quick else 15)
    block, block_err = fit_channel_block(
        np.array([r["channels"] for r in rows]),
        np.array([r["case"] for r in rows]),
        np.array([r["seconds"] for r in rows]),
    )
    steps.tick(f"channel block {block}")
    part_rows: list[dict] = []
    seen: set[str] = set()
    for name in list(cfg.nets)[: 1 if cfg.quick else None]:
        net = load_net({"name": name})
        part_rows += measure_part_costs(net, block, dev.threads, 2 if cfg.quick else 5, seen)
        steps.tick(f"parts of {name}")
    part_fixed, part_channels, part_err = fit_part_fixed(part_rows)
    k = base[kind].to_dict()
    k.update(
        layer_s=layer_s,
        regression=regression,
        channel_block=block,
        layer_overhead_s=0.0,
        part_fixed=part_fixed,
        part_fixed_channels=part_channels,
    )
    shares = list(part_fixed.values())
    prov = {
        "threads": dev.threads,
        "profiled_networks": nets_prov,
        "channel_scaling": {"block": block, "median_rel_error": round(block_err, 4), "rows": rows},
        "regression_families": sorted(regression),
        "part_fixed": {
            "layers": len(part_fixed),
            "share_p10_p50_p90": [round(float(x), 4) for x in np.percentile(shares, [10, 50, 90])]
            if shares
            else None,
            "line_median_rel_error": round(part_err, 4) if shares else None,
            "per_family_share_x_channels": part_channels,
        },
    }
    samples = {"net": nets_of, "family": fams, "terms": terms, "seconds": secs}
    return k, prov, samples


def anchor_to_runtime(
    k: dict[str, Any],
    samples: dict[str, list],
    runs: list[dict[str, Any]],
    nets: dict,
    overhead_ms: dict[str, float],
) -> dict[str, float]:
    """Scale each network's profiled layer times so they add up to its one-device run under
    the runtime, less ``overhead_ms`` (what the model adds for running it as one sub-model);
    the profile runs in this process, the runtime adds its own costs (MPI, the rank's loop).
    Refit the regression on the scaled times. Returns the factor per network."""
    from models_analytical.calibration import fit_regression

    factors = {}
    for r in runs:
        if r["label"] == "single":
            whole = nets[r["net"]]["whole_ms"]
            ms = measured_latency_ms(r["result"]) - overhead_ms.get(r["net"], 0.0)
            factors[r["net"]] = ms / whole
    secs = np.array(samples["seconds"]) * np.array([factors.get(n, 1.0) for n in samples["net"]])
    layer_s: dict[str, float] = {}
    for r in runs:
        if r["label"] != "single":
            continue
        for layer in r["model"].graph:
            key = layer_key(layer)
            if key in k["layer_s"] and key not in layer_s:
                layer_s[key] = k["layer_s"][key] * factors[r["net"]]
    k["layer_s"] = {**k["layer_s"], **layer_s}
    k["regression"] = fit_regression(samples["family"], np.array(samples["terms"]), secs)
    return {n: round(f, 4) for n, f in factors.items()}


def measure_links(cfg: DictConfig, platform: Platform, steps: Steps) -> tuple[dict, dict]:
    """One table per link class that a pair of the platform's devices uses."""
    from dse.calibrate.links import measure_link

    pairs: dict[str, tuple[int, int]] = {}
    n = len(platform.devices)
    for a in range(n):
        for b in range(n):
            if a != b:
                pairs.setdefault(platform.link_class(a, b), (a, b))
    tables, prov = {}, {}
    for cls, (a, b) in pairs.items():
        t = measure_link(platform, a, b, quick=bool(cfg.quick))
        tables[cls] = {"bytes": t["bytes"], "seconds": t["one_way_s"]}
        prov[cls] = {"devices": [platform.devices[a].name, platform.devices[b].name], **t}
        steps.tick(f"link {cls}")
    return tables, prov


def cut_devices(platform: Platform) -> tuple[int, int]:
    """The two cpu devices the deployments run on: the entry device first where it is a cpu
    (then the first network's :data:`ENTRY_ONLY` mapping leaves it idle)."""
    cpus = [i for i, d in enumerate(platform.devices) if d.kind == "cpu"]
    if len(cpus) < 2:
        raise DseError(f"platform '{platform.name}' needs two cpu devices to calibrate cuts")
    a = platform.entry if platform.entry in cpus else cpus[0]
    return a, next(c for c in cpus if c != a)


def measure_deployments(
    cfg: DictConfig, platform: Platform, coefficients: Coefficients, steps: Steps
) -> tuple[list[dict[str, Any]], dict[str, tuple[float, str]]]:
    """Four mappings per network (:data:`LABELS`; the first network also :data:`ENTRY_ONLY`)
    run under MPI: per mapping its model (for refitting), the batch and the merged
    measurements of its rounds; and per network the median of the speed probes beside its
    runs (with ``probe``: the speed its latencies are brought to,
    :func:`dse.runtime.measure.take_out_drift`) and its fingerprint."""
    from dse.runtime.measure import deploy, measure_interleaved, probe_times, take_out_drift
    from dse.runtime.probe import speed_probe

    a, b = cut_devices(platform)
    out = []
    speed: dict[str, tuple[float, str]] = {}
    iters = 3 if cfg.quick else int(cfg.iterations)
    rounds = 1 if cfg.quick else int(cfg.rounds)
    rng = np.random.default_rng(int(cfg.seed))
    with tempfile.TemporaryDirectory(prefix="dse-calibrate-") as tmp:
        for i, name in enumerate(list(cfg.nets)[: 1 if cfg.quick else None]):
            net = load_net({"name": name})
            model = AnalyticalModel(net.graph, platform, coefficients)
            times = model.tables.t_work[0]
            entry_only = i == 0 and a == platform.entry
            labels = (*LABELS, ENTRY_ONLY) if entry_only else LABELS
            batch = calibration_mappings(net.graph, times, a, b, len(platform.devices), entry_only)
            dirs = [Path(tmp) / f"{name}-{label}" for label in labels]
            for p, d in enumerate(dirs):
                deploy(net, platform, batch.take(p), d, int(cfg.seed), 2, iters)
            # interleaved rounds: a slow spell hits one round of each mapping, and the one-device
            # run the layer times are anchored to is measured beside the cut ones
            probe = speed_probe(dirs[0], platform) if cfg.probe else None
            results, interrupted = measure_interleaved(
                dirs, rounds, 2, iters, 600.0, rng, probe=probe
            )
            if interrupted:
                raise KeyboardInterrupt
            probes = probe_times(results)
            if probes:
                speed[name] = (round(float(np.median(probes)), 4), net.fingerprint)
            for p, (label, res) in enumerate(zip(labels, results, strict=True)):
                if res.get("status") != "ok":
                    raise DseError(f"calibration run {name}/{label} failed: {res.get('reason')}")
                if probes:
                    res = take_out_drift(res, speed[name][0])
                lat = res["latency_ms"]
                res["spread"] = round((lat["p90"] - lat["p10"]) / lat["median"], 4)
                res["rounds_ms"] = lat.get("rounds_ms", [lat["median"]])
                out.append(
                    {
                        "net": name,
                        "label": label,
                        "model": model,
                        "mapping": batch.take(p),
                        "result": res,
                    }
                )
                steps.tick(f"ran {name} {label}")
    return out, speed


def measure_submodels(
    cfg: DictConfig, platform: Platform, runs: list[dict[str, Any]], steps: Steps
) -> tuple[dict[str, float], dict[str, Any]]:
    """Each cut mapping's sub-models timed alone in this process, and what running work as
    sub-models costs beyond its layers, fitted on them (:mod:`dse.calibrate.submodels`)."""
    from dse.calibrate import submodels

    a, _ = cut_devices(platform)
    samples: list[dict[str, Any]] = []
    for name in dict.fromkeys(r["net"] for r in runs):
        cut = [r for r in runs if r["net"] == name and r["label"] in LABELS[1:]]
        batch = Mappings.concat([r["mapping"] for r in cut])
        samples += submodels.rows(
            load_net({"name": name}),
            cut[0]["model"],
            platform,
            batch,
            runs=1 if cfg.quick else 3,
            threads=platform.devices[a].threads,
            seed=int(cfg.seed),
        )
        steps.tick(f"sub-models of {name}")
    fitted, prov = submodels.fit(samples)
    return fitted, prov


def fit_memory(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Peak RSS while running = bias + coefficient x live activations + held x the buffers the
    runtime keeps (what a rank receives or gathers) + weights[class] x the rank's weights of
    that class + per segment x sub-models + per layer x layers (or parts) it runs; while
    loading = bias + loading[class] x weights (MB; classes: conv, other). A rank that runs no
    sub-model has its own bias (``empty_mb``: no onnxruntime session is ever created there).
    Non-negative, relative residuals."""
    from models_analytical.calibration import fit_nonnegative

    rows, target, names = [], [], []
    for r in runs:
        m: AnalyticalModel = r["model"]
        terms = {k: v[0] for k, v in m.memory_terms(r["mapping"]).items()}
        w = terms["weights_mb"]  # [D, class]
        for rank in r["result"]["ranks"]:
            d = next(i for i, dev in enumerate(m.platform.devices) if dev.name == rank["device"])
            if rank["peak_rss_running_mb"] is None:
                continue
            act = max(terms["peak_mb"][d] - w[d].sum(), 0.0)
            seg, parts, held = terms["segments"][d], terms["parts"][d], terms["held_mb"][d]
            runs_any = float(parts > 0)
            bias = [runs_any, 1.0 - runs_any]  # columns 0 and 9
            rows.append([bias[0], act, w[d, 0], w[d, 1], seg, 0.0, 0.0, parts, held, bias[1]])
            target.append(rank["peak_rss_running_mb"])
            rows.append([bias[0], 0.0, 0.0, 0.0, 0.0, w[d, 0], w[d, 1], 0.0, 0.0, bias[1]])
            target.append(rank["peak_rss_loading_mb"])
            names += [f"{r['net']}/{r['label']}/{rank['device']}/{x}" for x in ("run", "load")]
    a, y = np.array(rows), np.array(target)
    coef = fit_nonnegative(a, y, relative=True)
    err = np.abs(a @ coef - y) / y
    fitted = {
        "bias_mb": float(coef[0]),
        "coefficient": float(max(coef[1], 1e-6)),
        "per_layer_mb": float(coef[7]),
        "weights": {"conv": float(coef[2]), "other": float(coef[3])},
        "per_segment_mb": float(coef[4]),
        "loading": {"conv": float(coef[5]), "other": float(coef[6])},
        # a term no rank measured is left to the model's fallback (None), not fitted to 0:
        # held buffers then count like other tensors, an empty rank like any other
        "held": float(coef[8]) if a[:, 8].any() else None,
        "empty_mb": float(coef[9]) if a[:, 9].any() else None,
    }
    return fitted, {
        "rows": len(y),
        "median_rel_error": round(float(np.median(err)), 4),
        "max_rel_error": round(float(err.max()), 4),
        "measured_fitted_mb": {
            n: [round(float(t), 1), round(float(f), 1)]
            for n, t, f in zip(names, y, a @ coef, strict=True)
        },
    }


def fit_shared_host(runs: list[dict[str, Any]], platform: Platform) -> tuple[float, dict]:
    """How much slower a device's layers run while another device of its host has work in the
    same mapping: per rank of the cut mappings (with at least 2 ms of work), its measured
    compute over the model's, relative to the same over the network's one-device run measured
    in the same rounds; the median, at least 1. 1 (not measured) where the two devices the
    deployments use are on different hosts. The runs' models must have the factor at 1 (the
    kernel multiplies a device's whole busy time by it)."""
    a, b = cut_devices(platform)
    if platform.devices[a].host != platform.devices[b].host:
        return 1.0, {"factor": 1.0, "why": "the deployments' two devices are on different hosts"}
    names = [d.name for d in platform.devices]

    def ratios(r: dict[str, Any]) -> list[float]:
        busy = r["model"].evaluate(r["mapping"]).busy_s[0]
        out = []
        for rank in r["result"]["ranks"]:
            d = names.index(rank["device"])
            if busy[d] > 2e-3:
                out.append(rank["compute_ms"]["median"] / 1e3 / busy[d])
        return out

    # each network's one-device run; one under 2 ms of work gives no reference
    base = {r["net"]: ratios(r) for r in runs if r["label"] == "single"}
    rel: dict[str, list[float]] = {}
    for r in runs:
        if r["label"] in LABELS[1:] and base.get(r["net"]):
            ref = float(np.median(base[r["net"]]))
            rel.setdefault(r["net"], []).extend(x / ref for x in ratios(r))
    every = [x for v in rel.values() for x in v]
    factor = max(float(np.median(every)), 1.0) if every else 1.0
    return factor, {
        "factor": round(factor, 4),
        "ranks": len(every),
        "median_per_network": {n: round(float(np.median(v)), 4) for n, v in rel.items()},
        "p10_p90": [round(float(x), 4) for x in np.percentile(every, [10, 90])] if every else [],
    }


def fit_cuts(runs: list[dict[str, Any]]) -> tuple[tuple[float, float], dict]:
    """The cost of a tensor crossing devices beyond the link's measured time (fixed, per byte:
    the runtime's probe, receive and send calls) that makes the cut mappings' predicted
    latencies best match the measured ones (relative squared error); the sub-models' own
    costs are already in the model."""
    from scipy.optimize import minimize

    cut = [r for r in runs if r["label"] != "single"]
    measured = np.array([measured_latency_ms(r["result"]) / 1e3 for r in cut])

    def unpack(theta: np.ndarray) -> tuple[float, float]:
        return abs(theta[0]) * 1e-4, abs(theta[1]) * 1e-9

    def predict(theta: np.ndarray) -> np.ndarray:
        fixed, per_byte = unpack(theta)
        out = []
        for r in cut:
            m: AnalyticalModel = r["model"]
            out.append(m.with_transfer_costs(fixed, per_byte).evaluate(r["mapping"]).latency_s[0])
        return np.array(out)

    def loss(theta: np.ndarray) -> float:
        return float(np.sum((predict(theta) / measured - 1.0) ** 2))

    starts = [np.array([f, b]) for f in (0.0, 1.0, 5.0) for b in (0.0, 1.0, 3.0)]
    best = min((minimize(loss, s, method="Nelder-Mead") for s in starts), key=lambda r: r.fun)
    before = predict(np.zeros(2))
    after = predict(best.x)
    prov = {
        "mappings": [f"{r['net']}/{r['label']}" for r in cut],
        "spread": [r["result"]["spread"] for r in cut],
        "rounds_ms": [r["result"]["rounds_ms"] for r in cut],  # as measured
        "rounds_probe_ms": [r["result"]["latency_ms"].get("rounds_probe_ms") for r in cut],
        # what was fitted: the rounds brought to the speed reference (median of the rounds of
        # rounds_ms x reference / rounds_probe_ms), or as measured without a probe
        "measured_ms": [round(x * 1e3, 3) for x in measured],
        "predicted_without_cut_costs_ms": [round(x * 1e3, 3) for x in before],
        "predicted_ms": [round(x * 1e3, 3) for x in after],
    }
    return unpack(best.x), prov


def versions() -> dict[str, str]:
    import mpi4py
    import onnxruntime

    return {
        "python": pyplatform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "mpi4py": mpi4py.__version__,
    }


@hydra.main(config_path=str(CONF_DIR), config_name="calibrate", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    from dse.calibrate.store import calibrated_path
    from dse.files import write_text

    started = time.perf_counter()
    platform = app.platform_from(cfg)
    unknown = [n for n in cfg.nets if n not in zoo.NETS]
    if unknown or not cfg.nets:
        raise DseError(
            f"nets: unknown network '{unknown[0] if unknown else ''}': choose from "
            f"{', '.join(zoo.NETS)}"
        )
    base = base_coefficients(cfg, platform)
    kinds = sorted({d.kind for d in platform.devices})
    n_nets = 1 if cfg.quick else len(cfg.nets)
    runs_total = 0
    if cfg.deployments:  # one more run where the entry device can be left idle
        runs_total = len(LABELS) * n_nets + (cut_devices(platform)[0] == platform.entry)
        runs_total += n_nets * ("cpu" in kinds)  # each network's sub-models timed alone
    total = len(kinds) * (2 * n_nets + 1) + 1 + runs_total
    steps = Steps(total)
    raw: dict[str, Any] = {}
    samples: dict[str, Any] = {}
    prov: dict[str, Any] = {"kinds": {}}
    for kind in kinds:
        raw[kind], prov["kinds"][kind], samples[kind] = calibrate_kind(
            cfg, platform, kind, base, steps
        )
    raw["links"], prov["links"] = measure_links(cfg, platform, steps)
    coefficients = Coefficients.from_dict(raw, "calibration")
    if cfg.deployments:
        runs, speed = measure_deployments(cfg, platform, coefficients, steps)
        if speed:
            from dse.runtime.probe import probe_threads

            raw["speed_reference"] = {
                "whole_ms": {n: ms for n, (ms, _) in speed.items()},
                "fingerprints": {n: fp for n, (_, fp) in speed.items()},
                "threads": probe_threads(platform),
                "what": "the whole network alone (dse.runtime.probe), median over the probes "
                "beside the deployment runs; every latency fitted here was brought to this "
                "speed, and dse.fidelity compares its own probes with it",
            }
        if "cpu" in raw:  # the deployments run on cpu devices
            sub, prov["sub_models"] = measure_submodels(cfg, platform, runs, steps)
            raw["cpu"].update(sub, receive_on_device=True)
            coefficients = Coefficients.from_dict(raw, "calibration")
            overhead = {}  # the model's sub-model costs of each one-device run
            for r in runs:
                if r["label"] == "single":
                    m = AnalyticalModel(r["model"].graph, platform, coefficients)
                    busy = m.evaluate(r["mapping"]).busy_s.max() * 1e3
                    overhead[r["net"]] = busy - m.tables.t_work[0].sum() * 1e3
                    overhead[r["net"]] -= m.tables.t_fixed[0].sum() * 1e3
            nets = prov["kinds"]["cpu"]["profiled_networks"]
            prov["kinds"]["cpu"]["runtime_over_profile"] = anchor_to_runtime(
                raw["cpu"], samples["cpu"], runs, nets, overhead
            )
            raw["cpu"]["shared_host_factor"] = 1.0  # fitted next, against the model without it
            coefficients = Coefficients.from_dict(raw, "calibration")
            for r in runs:
                r["model"] = AnalyticalModel(r["model"].graph, platform, coefficients)
            shared, prov["shared_host"] = fit_shared_host(runs, platform)
            raw["cpu"]["shared_host_factor"] = shared
            coefficients = Coefficients.from_dict(raw, "calibration")
            for r in runs:
                r["model"] = AnalyticalModel(r["model"].graph, platform, coefficients)
        memory, prov["memory"] = fit_memory(runs)
        (fixed, per_byte), prov["cuts"] = fit_cuts(runs)
        for kind in kinds:
            raw[kind]["memory"].update(memory)
            raw[kind]["transfer_fixed_s"] = fixed
            raw[kind]["transfer_per_byte_s"] = per_byte
    steps.bar.close()
    out = Path(str(cfg.out)).expanduser() if cfg.get("out") else calibrated_path(platform.name)
    prov.update(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        host=pyplatform.node(),
        versions=versions(),
        nets=list(cfg.nets)[:n_nets],
        quick=bool(cfg.quick),
        seconds=round(time.perf_counter() - started, 1),
    )
    doc = {
        "description": (
            f"Calibrated by dse.calibrate on {prov['host']} for platform '{platform.name}'"
            + (" (quick: a smoke test, not for predictions)" if cfg.quick else "")
        ),
        "calibrated": True,
        "energy": "not calibrated: no energy counter was read; power_w are the platform file's "
        "assumptions",
        "provenance": prov,
        **{k: v for k, v in raw.items()},
    }
    Coefficients.from_dict(doc, str(out))  # what is written must read back
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(doc, indent=1))
    say(f"calibrated platform '{platform.name}' in {prov['seconds']:.0f} s: {out}")
    if not cfg.get("out"):
        say(
            f"later commands with platform={platform.name} use it; to go back, delete it or "
            "pass coefficients=platform"
        )
    return {"status": "ok", "out": str(out), "seconds": prov["seconds"]}


if __name__ == "__main__":
    run(main, "calibrate")
