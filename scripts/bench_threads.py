"""The analytical model's speed by thread count, batch size and machine load.

    python scripts/bench_threads.py [--net vgg16] [--seconds 2] [--rounds 3]

For 1 and all threads, a batch of 1 and of 1000 mappings, on an idle machine, with one busy
process fewer than the cores beside it, and with one per core (started and stopped by this
script), prints the median over interleaved rounds of mappings/s. AnalyticalModel runs batches
under PARALLEL_MIN_BATCH on one thread and larger ones on `model_threads` (default: every core
when the machine is idle, else one); these figures are why.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import numba
import numpy as np
import yaml
from bench_model import random_batch

from dse.net import load_net
from dse.paths import CONF_DIR
from dse.platform import load_platform
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel
from models_analytical.threads import ThreadTuner


def spin(stop) -> None:  # noqa: ANN001
    x = 0
    while not stop.is_set():
        x += 1


def rate(model: AnalyticalModel, batch, threads: int, seconds: float) -> float:
    model.tuner = ThreadTuner([threads])  # this count, not the model's own choice
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        model.evaluate(batch)
        done += len(batch)
    return done / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="vgg16")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cfg = yaml.safe_load((CONF_DIR / "platform" / "jetson_xavier_nx_x8.yaml").read_text())
    plat = load_platform(cfg)
    coeff = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    graph = load_net({"name": args.net}).graph
    model = AnalyticalModel(graph, plat, coeff)
    rng = np.random.default_rng(0)
    batches = {n: random_batch(graph, len(plat), n, rng) for n in (1, 1000)}
    model.evaluate(batches[1000])  # compile
    cores = numba.config.NUMBA_NUM_THREADS
    results: dict[tuple, list[float]] = {}
    n_cores = os.cpu_count() or 1
    for busy in sorted({0, n_cores - 1, n_cores}):
        load = f"{busy} busy"
        stop, procs = mp.Event(), []
        if busy:
            procs = [mp.Process(target=spin, args=(stop,)) for _ in range(busy)]
            for p in procs:
                p.start()
            time.sleep(0.5)
        for _ in range(args.rounds):
            for size, batch in batches.items():
                for threads in sorted({1, cores}):
                    r = rate(model, batch, threads, args.seconds / 2)
                    results.setdefault((load, size, threads), []).append(r)
        stop.set()
        for p in procs:
            p.join()
    for (load, size, threads), rs in sorted(results.items()):
        print(
            f"{args.net} {load} batch {size:4d} threads {threads}: "
            f"{statistics.median(rs):,.0f} mappings/s (spread {min(rs):,.0f}-{max(rs):,.0f})"
        )


if __name__ == "__main__":
    main()
