"""How close NSGA-II gets to the true front of small networks whose every mapping is enumerated.

    python benchmarks/search_quality.py [--pop 50] [--gens 20] [--seeds 5] [--capacity 2.6 3 1e9]
        [--structured-seeds]

The network is conv -> relu -> conv -> relu -> conv -> relu on 3 devices joined by slow links
(5 MB/s), objectives latency, memory and total energy: 9,261 distinct naive mappings. For each
capacity (MB; memory binds below 5.8) and encoding, every gene vector is decoded and scored,
which gives the true Pareto front of that encoding; then NSGA-II runs with the given budget and
several seeds. Printed per case: feasible share of all mappings, distinct mappings, evaluations
used, hypervolume found / true (mean, worst), share of true front points found, distinct
mappings in the final population. ``--structured-seeds`` adds
:func:`chromosomes.seeds.seed_population` to the first population (``seed_structured``).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' helpers

from chromosomes import make_chromosome  # noqa: E402
from dse.config import MUTATIONS, AlgorithmConfig  # noqa: E402
from dse.net.build import build_graph  # noqa: E402
from dse.search import nsga2  # noqa: E402
from dse.search.problem import MappingProblem  # noqa: E402
from models_analytical.model import AnalyticalModel  # noqa: E402
from tests.helpers import onnx_factory as f  # noqa: E402
from tests.helpers.platforms import coefficients, platform  # noqa: E402


def six_layers():
    return build_graph(f.conv_relu_chain(), "six")


def problem(chromosome: str, capacity: float, splits: int | None = None) -> MappingProblem:
    g = six_layers()
    plat = platform(n=3, bw=5e6, latency=1e-4, capacity=capacity)
    model = AnalyticalModel(g, plat, coefficients(rate=2e9))
    return MappingProblem(
        make_chromosome(chromosome, g, 3, splits=splits),
        model,
        ["latency", "memory", "total_energy"],
    )


def truth(p: MappingProblem) -> tuple[np.ndarray, int, float]:
    """The true front (objectives), the number of distinct mappings and the feasible share."""
    upper = p.chromosome.upper.tolist()
    genes = np.array(list(itertools.product(*[range(u + 1) for u in upper])), dtype=np.int64)
    mappings = p.chromosome.decode(genes)
    _, first = np.unique(mappings.keys(), return_index=True)
    out: dict = {}
    p.evaluate_mappings(mappings.take(np.sort(first)), out)
    F, feasible = out["F"], out["G"][:, 0] <= 0
    Ff = F[feasible]
    keep = np.ones(len(Ff), dtype=bool)
    for i in range(len(Ff)):
        keep[i] = not ((Ff <= Ff[i]).all(1) & (Ff < Ff[i]).any(1)).any()
    return np.unique(Ff[keep], axis=0), len(first), float(feasible.mean())


def run(p: MappingProblem, settings: AlgorithmConfig, seed: int) -> nsga2.SearchState:
    return nsga2.run(nsga2.new_search(p, settings, seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pop", type=int, default=50)
    ap.add_argument("--gens", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--capacity", type=float, nargs="+", default=[2.6, 3.0, 1e9])
    ap.add_argument("--mutation", default="pm", choices=sorted(MUTATIONS))
    ap.add_argument("--structured-seeds", action="store_true")
    args = ap.parse_args()
    for capacity in args.capacity:
        for chrom, splits in (("naive", None), ("advanced", 2), ("advanced", 3)):
            p = problem(chrom, capacity, splits)
            front, n_distinct, feasible = truth(p)
            state = nsga2.new_search(p, AlgorithmConfig(), 0)
            ref = state.reference.hypervolume(front)
            ratios, found, distinct, evals = [], [], [], []
            for seed in range(args.seeds):
                settings = AlgorithmConfig(
                    pop_size=args.pop,
                    n_gen=args.gens,
                    mutation=MUTATIONS[args.mutation],
                    seed_structured=args.structured_seeds,
                )
                s = run(p, settings, seed)
                _, fs, gs = nsga2.front(s)
                fs = fs[gs[:, 0] <= 0]
                ratios.append(s.reference.hypervolume(fs) / ref if ref else float("nan"))
                got = {tuple(r) for r in np.round(fs, 9).tolist()}
                found.append(np.mean([tuple(r) in got for r in np.round(front, 9).tolist()]))
                distinct.append(len(set(s.pop.keys)) / len(s.pop))
                evals.append(s.evaluations)
            name = chrom + (f"-{splits}" if splits else "")
            print(
                f"capacity {capacity:g} MB, {name}: {feasible:.0%} feasible of {n_distinct} "
                f"mappings, {np.mean(evals):.0f} evaluations; hypervolume {np.mean(ratios):.4f} "
                f"(worst {np.min(ratios):.4f}) of the true front's, {np.mean(found):.0%} of its "
                f"{len(front)} points found, {np.mean(distinct):.0%} distinct in the population"
            )


if __name__ == "__main__":
    main()
