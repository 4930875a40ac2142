"""Where splitting by rows pays, measured (issue 29): run on a quiet machine; prints its figures.

    python scripts/spatial.py vgg16        # VGG-16 on localhost: rows, channels, one device
    python scripts/spatial.py mobilenetv2  # searches with and without rows, bests measured
    python scripts/spatial.py mobilenetv2-by-hand  # the first k layers by rows or channels
    python scripts/spatial.py cluster      # bytes on edge3_ethernet (needs its cluster up)

``vgg16``: VGG-16 on ``localhost`` (two cores, a rank each) as one device, with every
splittable layer split by channels 50/50 (LOP), with every convolution split by rows 50/50 (the
fully connected layers by channels), and with only its first two blocks split, by rows or by
channels; runs interleaved (``--rounds``), medians. Prints latency, speed-up over one device
(target for rows: at least 1.7x), peak memory per rank predicted and measured (target: rows
below channels in the first blocks at the same speed-up), bytes sent predicted and measured,
and the equivalence verdict of every run.

``mobilenetv2``: two searches of MobileNetV2 on ``localhost`` (vertical and channel splits;
the same with rows: ``chromosome.spatial=true``), both with structured seeds
(``algorithm.seed_structured=true``: every splittable layer over both devices in the first
population, by channels, and by rows where the search has rows), then the ``--top``
best-latency mappings of each front deployed and measured interleaved; prints the best
measured latency of each (target: with rows below without).

``mobilenetv2-by-hand``: MobileNetV2's first ``--first`` row-splittable layers split over the
two cores by rows and by channels, against one device: whether any row split pays there.

``cluster``: on an emulated cluster with slow links (``--platform``, default
``edge3_ethernet``), the same layers split over two boards by channels and by rows: bytes
predicted and measured (target: rows fewer), and latency.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the package of this checkout

from dse.app import calibration_of  # noqa: E402
from dse.mapping import Mappings, from_device_lists  # noqa: E402
from dse.measuring.rounds import Rounds, measure_interleaved  # noqa: E402
from dse.net import Net, load_net  # noqa: E402
from dse.paths import CONF_DIR  # noqa: E402
from dse.platform import Platform, load_platform  # noqa: E402
from dse.runtime.launch.deploy import deploy  # noqa: E402
from models_analytical.coefficients import load_coefficients  # noqa: E402
from models_analytical.model import AnalyticalModel  # noqa: E402


def platform_and_model(name: str, net: Net) -> tuple[Platform, AnalyticalModel, str]:
    """The platform, the model on its calibration when there is one (else its shipped file)."""
    cfg = yaml.safe_load((CONF_DIR / "platform" / f"{name}.yaml").read_text())
    plat = load_platform(cfg)
    path = calibration_of(name) or CONF_DIR / "platform" / cfg["coefficients"]
    return plat, AnalyticalModel(net.graph, plat, load_coefficients(path)), str(path)


def split_mapping(net: Net, n_dev: int, layers, rows: bool, devices=(0, 1)) -> Mappings:
    """``layers`` (indices) over ``devices``, by rows where they can and ``rows``, else by
    channels; every other layer on ``devices[0]``."""
    g = net.graph
    chosen = set(layers)
    lists = [[list(devices) if i in chosen else [devices[0]] for i in range(len(g))]]
    by_rows = [i for i in chosen if rows and g.row_splittable[i]]
    return from_device_lists(g, n_dev, lists, rows=by_rows)


def measure(
    net: Net, plat: Platform, model: AnalyticalModel, named: dict[str, Mappings], args
) -> dict[str, dict]:
    """Deploy every mapping, run them interleaved, and return per name: the measurement and the
    model's evaluation."""
    with tempfile.TemporaryDirectory(prefix="bench-spatial-") as tmp:
        dirs = []
        for k, m in enumerate(named.values()):
            d = Path(tmp) / f"m{k}"  # mpiexec takes no ',' or ':' in a deployment's path
            deploy(net, plat, m, d, warmup=args.warmup, iterations=args.iterations)
            dirs.append(d)
        rounds = Rounds(args.rounds, args.warmup, args.iterations, 1800)
        done, _ = measure_interleaved(dirs, rounds, np.random.default_rng(0))
    return {
        name: {
            "measured": meas,
            "predicted": model.evaluate(m),
            "memory_phases": model.memory_phases(m),
        }
        for (name, m), meas in zip(named.items(), done, strict=True)
    }


def report(results: dict[str, dict], base: str) -> None:
    one = results[base]["measured"].latency.median
    print(
        "| mapping | measured ms (median [p10, p90]) | speed-up | predicted ms | peak RSS per rank "
        "MB, measured (predicted) | running / loading, measured (predicted) | MB sent, measured "
        "(predicted) | outputs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        meas, ev = r["measured"], r["predicted"]
        if not meas.ok:
            print(f"| {name} | failed: {meas.reason} | | | | | | |")
            continue
        lat = meas.latency
        ranks = meas.ranks
        used = np.flatnonzero(ev.used[0])
        running, loading = r["memory_phases"]
        peak = ", ".join(
            f"{rk.peak_rss_mb or 0:.0f} ({ev.memory_mb[0, d]:.0f})"
            for rk, d in zip(ranks, used, strict=False)
        )
        mem = ", ".join(
            f"{rk.peak_rss_running_mb or 0:.0f} / {rk.peak_rss_loading_mb or 0:.0f} "
            f"({running[0, d]:.0f} / {loading[0, d]:.0f})"
            for rk, d in zip(ranks, used, strict=False)
        )
        sent = sum(rk.bytes_sent for rk in ranks) / 1e6
        eq = meas.equivalence
        rel = eq.max_rel_error if eq is not None and eq.max_rel_error is not None else np.nan
        print(
            f"| {name} | {lat.median:.1f} [{lat.p10:.1f}, {lat.p90:.1f}] | "
            f"{one / lat.median:.2f}x | {ev.latency_s[0] * 1e3:.1f} | {peak} | {mem} | "
            f"{sent:.2f} ({ev.bytes_sent[0].sum() / 1e6:.2f}) | "
            f"{'equal' if eq is not None and eq.passed else 'DIFFER'} "
            f"(max rel {rel:.1e}) |"
        )


def vgg16(args) -> None:
    net = load_net({"name": "vgg16"})
    plat, model, coeff = platform_and_model("localhost", net)
    g = net.graph
    split = [int(i) for i in g.split_layers]
    first = [i for i in split if g.names[i].startswith(("conv1_", "conv2_"))]
    named = {
        "one device": split_mapping(net, len(plat), [], rows=False),
        "channels, every layer": split_mapping(net, len(plat), split, rows=False),
        "rows, every conv": split_mapping(net, len(plat), split, rows=True),
        "channels, blocks 1-2": split_mapping(net, len(plat), first, rows=False),
        "rows, blocks 1-2": split_mapping(net, len(plat), first, rows=True),
    }
    print(
        f"VGG-16 on localhost, coefficients {coeff}; {args.rounds} interleaved rounds of "
        f"{args.warmup} + {args.iterations} iterations\n",
        flush=True,
    )
    report(measure(net, plat, model, named, args), "one device")


def search_front(net: str, spatial: bool, out: Path, args) -> list[Path]:
    """Run the search; the directories of its best-latency mappings (mapping + horizontal)."""
    cmd = [
        sys.executable, "-m", "dse", f"+net={net}", "platform=localhost", "progress=false",
        f"chromosome.spatial={str(spatial).lower()}", f"hydra.run.dir={out}",
        f"algorithm.pop_size={args.pop}", f"algorithm.n_gen={args.gen}",
        "objectives=[latency,memory]", "algorithm.seed_structured=true",
    ]  # fmt: skip
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return [out]


def mobilenetv2(args) -> None:
    import csv

    from chromosomes import AdvancedChromosome

    net = load_net({"name": "mobilenetv2"})
    plat, model, coeff = platform_and_model("localhost", net)
    speed = model.device_speed()
    named: dict[str, Mappings] = {"one device": split_mapping(net, len(plat), [], rows=False)}
    with tempfile.TemporaryDirectory(prefix="bench-spatial-search-") as tmp:
        for spatial in (False, True):
            out = Path(tmp) / ("rows" if spatial else "channels")
            search_front("mobilenetv2", spatial, out, args)
            chrom = AdvancedChromosome(net.graph, len(plat), speed=speed, spatial=spatial)
            rows = list(csv.DictReader((out / "pareto.csv").open()))
            rows.sort(key=lambda r: float(r["latency_ms"]))
            for k, row in enumerate(rows[: args.top]):
                genes = np.array([int(x) for x in row["genes"].split()])
                label = f"{'three kinds' if spatial else 'vertical + channels'} #{k}"
                named[label] = chrom.decode(genes[None])
    print(f"MobileNetV2 on localhost, coefficients {coeff}\n", flush=True)
    results = measure(net, plat, model, named, args)
    report(results, "one device")
    best = {}
    for kind in ("vertical + channels", "three kinds"):
        ok = [
            r["measured"].latency.median
            for name, r in results.items()
            if name.startswith(kind) and r["measured"].ok
        ]
        best[kind] = min(ok) if ok else float("nan")
    print(
        f"\nbest measured: vertical + channels {best['vertical + channels']:.2f} ms, three kinds "
        f"{best['three kinds']:.2f} ms (target: three kinds below)"
    )


def mobilenetv2_by_hand(args) -> None:
    """MobileNetV2's first ``k`` row-splittable layers over both cores, by rows and by
    channels (the rest on the first core), for each ``k`` of ``--first``."""
    net = load_net({"name": "mobilenetv2"})
    plat, model, coeff = platform_and_model("localhost", net)
    g = net.graph
    by_rows = [int(i) for i in g.split_layers if g.row_splittable[i]]
    named = {"one device": split_mapping(net, len(plat), [], rows=False)}
    for k in sorted({min(k, len(by_rows)) for k in args.first}):
        for rows in (True, False):
            layers = by_rows[:k]
            named[f"first {k} by {'rows' if rows else 'channels'}"] = split_mapping(
                net, len(plat), layers, rows=rows
            )
    print(f"MobileNetV2 on localhost by hand, coefficients {coeff}\n", flush=True)
    report(measure(net, plat, model, named, args), "one device")


def cluster(args) -> None:
    from dse.cluster import launcher_for

    net = load_net({"name": args.net})
    plat, model, coeff = platform_and_model(args.platform, net)
    g = net.graph
    hosts = [d.host for d in plat.devices]
    a = 0
    b = next(d for d in range(len(plat)) if hosts[d] != hosts[a])
    split = [int(i) for i in g.split_layers if g.row_splittable[i]][: args.layers]
    named = {
        "channels": split_mapping(net, len(plat), split, rows=False, devices=(a, b)),
        "rows": split_mapping(net, len(plat), split, rows=True, devices=(a, b)),
    }
    launcher = launcher_for(
        yaml.safe_load((CONF_DIR / "platform" / f"{args.platform}.yaml").read_text())
    )
    print(
        f"{args.net} on {args.platform} (devices {plat.keys[a]}, {plat.keys[b]}), the first "
        f"{len(split)} convolutions split; coefficients {coeff}\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-spatial-cluster-") as tmp:
        dirs = []
        for name, m in named.items():
            d = Path(tmp) / name
            deploy(
                net, plat, m, d, warmup=args.warmup, iterations=args.iterations, launcher=launcher
            )
            dirs.append(d)
        done, _ = measure_interleaved(
            dirs,
            Rounds(args.rounds, args.warmup, args.iterations, 1800),
            np.random.default_rng(0),
            launcher=launcher,
        )
    results = {
        name: {"measured": meas, "predicted": model.evaluate(m)}
        for (name, m), meas in zip(named.items(), done, strict=True)
    }
    report(results, "channels")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["vgg16", "mobilenetv2", "mobilenetv2-by-hand", "cluster"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--pop", type=int, default=200, help="mobilenetv2: the searches' population")
    ap.add_argument("--gen", type=int, default=50, help="mobilenetv2: their generations")
    ap.add_argument("--top", type=int, default=3, help="mobilenetv2: best mappings measured")
    ap.add_argument(
        "--first", type=int, nargs="+", default=[12, 48, 999],
        help="mobilenetv2-by-hand: how many row-splittable layers to split (999: all)",
    )  # fmt: skip
    ap.add_argument("--platform", default="edge3_ethernet", help="cluster: the platform")
    ap.add_argument("--net", default="vgg16", help="cluster: the network")
    ap.add_argument("--layers", type=int, default=4, help="cluster: convolutions split")
    args = ap.parse_args()
    run = {"vgg16": vgg16, "mobilenetv2": mobilenetv2, "cluster": cluster}
    run["mobilenetv2-by-hand"] = mobilenetv2_by_hand
    run[args.what](args)


if __name__ == "__main__":
    main()
