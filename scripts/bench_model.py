"""Speed of the analytical model: random valid hybrid mappings evaluated per second.

    python scripts/bench_model.py [--nets vgg16 densenet121] [--batch 1000] [--threads 1]

Prints one line per network, `NET: N mappings/s`, on the default 16-device platform
(jetson_xavier_nx_x8). Mappings put every layer on a random device and split every splittable
layer over 1-4 random devices; numba compilation happens before timing.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import yaml

from dse.mapping import Mappings, from_devices
from dse.net import load_net
from dse.paths import CONF_DIR
from dse.platform import load_platform
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel


def random_batch(graph, n_dev: int, size: int, rng: np.random.Generator) -> Mappings:
    """Every layer on a random device; a splittable layer on 0-3 more on average (equal
    parts)."""
    on = np.zeros((size, len(graph), n_dev), dtype=bool)
    rows = np.arange(size)
    for layer in range(len(graph)):
        on[rows, layer, rng.integers(n_dev, size=size)] = True
        if graph.splittable[layer]:
            extra = rng.random((size, n_dev)) < rng.integers(0, 4, size=size)[:, None] / n_dev
            on[:, layer] |= extra
    return from_devices(graph, on)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["vgg16", "densenet121"])
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=1, help="kernel threads (0: all cores)")
    args = ap.parse_args()
    cfg = yaml.safe_load((CONF_DIR / "platform" / "jetson_xavier_nx_x8.yaml").read_text())
    plat = load_platform(cfg)
    coeff = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    rng = np.random.default_rng(0)
    for net in args.nets:
        graph = load_net({"name": net}).graph
        model = AnalyticalModel(graph, plat, coeff, args.threads or os.cpu_count())
        batch = random_batch(graph, len(plat), args.batch, rng)
        model.evaluate(batch.take(slice(0, 2)))  # compile
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            model.evaluate(batch)
            done += len(batch)
        rate = done / (time.perf_counter() - t0)
        print(f"{net}: {rate:,.0f} mappings/s")


if __name__ == "__main__":
    main()
