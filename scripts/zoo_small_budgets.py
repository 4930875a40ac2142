"""The small-budget settings on the zoo's networks, whose fronts are not known: the hypervolume
(each problem's fixed normalisation, dse/search/hypervolume.py) of each setting's final front.

    python scripts/zoo_small_budgets.py [--nets alexnet vgg16 densenet121]
        [--encodings naive advanced] [--budgets 1000] [--seeds 5]
        [--settings before sqrt local small] [--thesis]

Each network on the default platform (``python -m dse +net=NAME chromosome=ENC``), searched
in-process with ``algorithm.max_evaluations`` at each budget and these settings (population P
from the budget B):

* ``before``: P = sqrt(B) / 2, NSGA-II alone (scripts/search_quality.py before the local
  step);
* ``sqrt``: P = sqrt(B), NSGA-II alone;
* ``local``: P = sqrt(B), the local step on half the offspring (``algorithm.local_share=0.5``);
* ``small``: P = 0.75 sqrt(B), ``algorithm.local_share=0.75``, ``algorithm.crowding=2nn``:
  the settings recommended for small budgets (docs/results/search-quality.md).

``--thesis`` runs the thesis's 1000 x 100 instead, NSGA-II alone against the local step on
half the offspring. Prints mean [worst] of the seeds; deterministic per seed and commit.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hydra import compose, initialize_config_dir  # noqa: E402

from dse import app  # noqa: E402
from dse.config import AlgorithmConfig, register  # noqa: E402
from dse.paths import CONF_DIR  # noqa: E402
from dse.search import nsga2  # noqa: E402
from dse.search.problem import MappingProblem  # noqa: E402

#: name -> (population factor of sqrt(budget), local share, crowding)
SETTINGS = {
    "before": (0.5, 0.0, "cd"),
    "sqrt": (1.0, 0.0, "cd"),
    "local": (1.0, 0.5, "cd"),
    "small": (0.75, 0.75, "2nn"),
}


def problem(net: str, encoding: str) -> MappingProblem:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+net={net}", f"chromosome={encoding}"])
    n, _, model = app.model_from(cfg)
    return MappingProblem(app.chromosome_from(cfg, n, model), model, list(cfg.objectives))


def hypervolumes(p: MappingProblem, settings: AlgorithmConfig, seeds: int) -> list[float]:
    return [
        nsga2.run(nsga2.new_search(p, settings, seed)).history[-1]["hypervolume"]
        for seed in range(seeds)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["alexnet", "vgg16", "densenet121"])
    ap.add_argument("--encodings", nargs="+", default=["naive", "advanced"])
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--thesis", action="store_true")
    args = ap.parse_args()
    logging.getLogger("dse").setLevel(logging.ERROR)
    register()
    runs: list[tuple[str, int, AlgorithmConfig]] = []
    if args.thesis:
        for name, share in (("alone", 0.0), ("local 1/2", 0.5)):
            runs.append((name, 100_000, AlgorithmConfig(local_share=share)))
    else:
        for budget in args.budgets:
            for name in args.settings:
                factor, share, crowding = SETTINGS[name]
                pop = int(min(1000, max(10, round(factor * math.sqrt(budget)))))
                settings = AlgorithmConfig(
                    pop_size=pop,
                    n_gen=10**6,
                    max_evaluations=budget,
                    local_share=share,
                    crowding=crowding,
                )
                runs.append((name, budget, settings))
    print("| network | encoding | budget | settings | population | hypervolume mean [worst] |")
    print("|---|---|---|---|---|---|", flush=True)
    for net in args.nets:
        for enc in args.encodings:
            p = problem(net, enc)
            for name, budget, settings in runs:
                hv = hypervolumes(p, settings, args.seeds)
                print(
                    f"| {net} | {enc} | {budget} | {name} | {settings.pop_size} "
                    f"| {np.mean(hv):.3f} [{np.min(hv):.3f}] |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
