"""Does the search beat the fastest device and a hand-written split? Best latency per seed.

    python scripts/uneven_splits.py [--nets vgg16 alexnet] [--encodings advanced naive]
        [--seeds 5] [--set chromosome.shares=equal ...] [--structured-seeds]

For each network and hybrid encoding, runs the headline search (``python -m dse +net=NET
chromosome=ENC``: default platform, population and generations, plus any ``--set``
overrides) with seeds 0 .. N-1 and prints its best latency next to two mappings scored by
the same model:

* the single fastest device (the best one-device mapping);
* the hand mapping: every splittable layer named conv3*, conv4* or conv5* split 70/30 between
  the fastest device and the other device of its host, everything else on the fastest device
  (on VGG-16 over the default platform: conv3_1-conv5_3 over board 0's GPU and CPU).

``--structured-seeds`` also puts :func:`chromosomes.seeds.seed_population` into the first
population (``algorithm.seed_structured=true``), at the same number of evaluations. The last
column says whether the run beat both references.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import dse.config  # noqa: E402
from chromosomes.seeds import device_order  # noqa: E402
from dse import app  # noqa: E402
from dse.mapping import from_autodice  # noqa: E402
from dse.paths import CONF_DIR  # noqa: E402
from dse.search import nsga2  # noqa: E402
from dse.search.problem import MappingProblem  # noqa: E402

HAND_LAYERS = ("conv3", "conv4", "conv5")
HAND_SHARE = 0.7  # of a split layer's channels on the fastest device


def build(net: str, overrides: list[str]):
    dse.config.register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+net={net}", *overrides])
    dse.config.check(cfg)
    netobj, platform, model = app.model_from(cfg)
    problem = MappingProblem(app.chromosome_from(cfg, netobj, model), model, cfg.objectives)
    return cfg, netobj, platform, model, problem, OmegaConf.to_object(cfg.algorithm)


def latency_ms(model, batch) -> np.ndarray:  # noqa: ANN001
    return model.evaluate(batch).latency_s * 1e3


def references(netobj, platform, model, problem) -> tuple[str, float, str, float]:  # noqa: ANN001
    """(fastest device, its latency, the hand mapping's devices, its latency) in ms."""
    chrom, graph = problem.chromosome, netobj.graph
    singles = np.stack([chrom.single_device(d) for d in range(chrom.n_devices)])
    one = latency_ms(model, chrom.decode(singles))
    fastest = int(np.argmin(one))
    hosts = [d.host for d in platform.devices]
    order = device_order(model.device_speed(), hosts)
    fast = order[0] if hosts[order[0]] == hosts[fastest] else fastest
    mate = next((d for d in order if d != fast and hosts[d] == hosts[fast]), None)
    keys = platform.keys
    split = [
        n for n, s in zip(graph.names, graph.splittable, strict=True) if s and n[:5] in HAND_LAYERS
    ]
    if mate is None or not split:
        return keys[fastest], float(one[fastest]), "-", float("nan")
    mapping = {keys[fast]: list(graph.names), keys[mate]: split}
    horizontal = {
        n: [
            "lop",
            [round(HAND_SHARE * int(graph.out_channels[graph.names.index(n)]))],
            [keys[fast], keys[mate]],
        ]
        for n in split
    }
    hand = latency_ms(model, from_autodice(graph, keys, mapping, horizontal))
    return keys[fastest], float(one[fastest]), f"{keys[fast]}+{keys[mate]}", float(hand[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["vgg16", "alexnet"])
    ap.add_argument("--encodings", nargs="+", default=["advanced", "naive"])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--set", nargs="*", default=[], help="more overrides, e.g. algorithm.n_gen=20")
    ap.add_argument("--structured-seeds", action="store_true")
    args = ap.parse_args()
    if args.structured_seeds:
        args.set.append("algorithm.seed_structured=true")
    print(
        f"overrides: {' '.join(args.set) or '(defaults)'}"
        + ("; structured seeds" if args.structured_seeds else "")
    )
    print(
        "| net | encoding | best latency per seed (ms) | mean | fastest device (ms) "
        "| hand mapping (ms) | beats both |"
    )
    print("|---|---|---|---|---|---|---|")
    for net in args.nets:
        for enc in args.encodings:
            cfg, netobj, platform, model, problem, settings = build(
                net, [f"chromosome={enc}", *args.set]
            )
            dev, one, hand_devs, hand = references(netobj, platform, model, problem)
            bests, t0 = [], time.perf_counter()
            for seed in range(args.seeds):
                state = nsga2.run(nsga2.new_search(problem, settings, seed))
                feasible = state.pop.cv <= 0
                lat = state.pop.F[feasible, problem.objectives.index("latency")]
                bests.append(float(lat.min()) if feasible.any() else np.nan)
            bar = min(one, hand) if hand == hand else one
            wins = sum(b < bar for b in bests)
            print(
                f"| {net} | {enc} | {', '.join(f'{b:.2f}' for b in bests)} | "
                f"{statistics.mean(bests):.2f} | {dev} {one:.2f} | {hand_devs} {hand:.2f} | "
                f"{wins}/{len(bests)} |",
                flush=True,
            )
            print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
