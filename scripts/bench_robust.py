"""The search's time per evaluation with profiles (``robust=worst``) against without.

    python scripts/bench_robust.py [--nets vgg16 resnet50] [--profiles 1 3 4]
        [--pop 1000] [--gens 5] [--rounds 5]

Each network on edge3_ethernet (``python -m dse +net=NAME platform=edge3_ethernet``) searched
in-process, ``--gens`` generations of ``--pop``, once per round with each count of profiles
(the nominal counted: 1 is the search without profiles; 3 adds ``wifi_50``, every network link
at 50 Mbit/s, and ``edge0_hot``, edge0_cpu at half speed; 4 adds ``edge1_slow_port``, edge1's
port at 50 Mbit/s), the counts interleaved in each round. Prints, per network and count, the
median over rounds of the search's seconds per evaluation (``SearchState.seconds`` over its
evaluations: breeding, the model, survival) and its ratio to one profile's. The model's kernel
is compiled before timing.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hydra import compose, initialize_config_dir  # noqa: E402

from dse import app  # noqa: E402
from dse.config import AlgorithmConfig, register  # noqa: E402
from dse.paths import CONF_DIR  # noqa: E402
from dse.search import nsga2  # noqa: E402
from dse.search.problem import MappingProblem  # noqa: E402

#: The profiles in the order a count takes them (after the nominal).
PROFILES = {
    "wifi_50": "{network_mbit:50}",
    "edge0_hot": "{speed:{edge0_cpu:0.5}}",
    "edge1_slow_port": "{ports:{edge1:{rate_mbit:50}}}",
}


def problem(net: str, n_profiles: int) -> MappingProblem:
    """The problem of ``net`` on edge3_ethernet with the nominal and ``n_profiles - 1`` more."""
    overrides = [f"+net={net}", "platform=edge3_ethernet"]
    if n_profiles > 1:
        chosen = list(PROFILES.items())[: n_profiles - 1]
        given = ",".join(f"{name}:{spec}" for name, spec in chosen)
        overrides += ["robust=worst", f"+platform.profiles={{{given}}}"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    n, _, model = app.model_from(cfg)
    chromosome = app.chromosome_from(cfg, n, model)
    return MappingProblem(chromosome, model, list(cfg.objectives), app.profiles_from(cfg, model))


def seconds_per_evaluation(p: MappingProblem, settings: AlgorithmConfig, seed: int) -> float:
    state = nsga2.run(nsga2.new_search(p, settings, seed))
    return state.seconds / state.evaluations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["vgg16", "resnet50"])
    ap.add_argument("--profiles", type=int, nargs="+", default=[1, 3, 4])
    ap.add_argument("--pop", type=int, default=1000)
    ap.add_argument("--gens", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    logging.getLogger("dse").setLevel(logging.ERROR)
    register()
    settings = AlgorithmConfig(pop_size=args.pop, n_gen=args.gens)
    for net in args.nets:
        problems = {k: problem(net, k) for k in args.profiles}
        for p in problems.values():  # compiled, and the thread tuner's first look
            seconds_per_evaluation(p, AlgorithmConfig(pop_size=args.pop, n_gen=1), 0)
        times: dict[int, list[float]] = {k: [] for k in args.profiles}
        for r in range(args.rounds):
            for k in args.profiles:
                times[k].append(seconds_per_evaluation(problems[k], settings, r))
        base = statistics.median(times[args.profiles[0]])
        for k in args.profiles:
            med = statistics.median(times[k])
            print(
                f"{net}: {k} profile(s): {med * 1e6:.1f} us per evaluation "
                f"(x{med / base:.2f} of {args.profiles[0]})",
                flush=True,
            )


if __name__ == "__main__":
    main()
