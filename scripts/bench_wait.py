"""How a waiting rank waits: spinning in MPI's Probe against polling then sleeping.

A rank that waits for a tensor either spins in ``Probe`` (its core stays busy) or polls for
``DSE_WAIT_SPIN_US`` microseconds and then sleeps between polls (its core is free). On a
2-core machine, a spinning rank can slow the rank that computes beside it. Four mappings of
one network (one device; all but the last layer on device 0, so device 1 waits the whole run;
a vertical cut at half the layers; every splittable layer over both devices) run in both
modes, interleaved in random order, and the medians per mapping and mode are printed.

    python scripts/bench_wait.py --net resnet50 --rounds 5      # quiet machine: it measures
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import yaml

from dse.mapping import from_device_lists
from dse.net import load_net
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.runtime.launch.deploy import deploy  # noqa: E402
from dse.runtime.launch.mpiexec import launch

MODES = {"spin": "spin", "sleep": "200"}


def mappings(net):
    g = net.graph
    n = len(g)
    lists = {
        "single": [[0]] * n,
        "tail": [[0]] * (n - 1) + [[1]],
        "vertical": [[0]] * (n // 2) + [[1]] * (n - n // 2),
        "split": [[0, 1] if g.splittable[i] else [0] for i in range(n)],
    }
    return {k: from_device_lists(g, 2, [v]) for k, v in lists.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet50")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=10)
    a = ap.parse_args()
    platform = load_platform(yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text()))
    net = load_net({"name": a.net})
    maps = mappings(net)
    res = {(k, w): [] for k in maps for w in MODES}
    keys = list(res)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bench-wait-") as tmp:
        for k, m in maps.items():
            deploy(net, platform, m, Path(tmp) / k)
        for _ in range(a.rounds):
            for i in rng.permutation(len(keys)).tolist():
                k, w = keys[i]
                os.environ["DSE_WAIT_SPIN_US"] = MODES[w]
                r = launch(Path(tmp) / k, timeout_s=600, warmup=3, iterations=a.iterations)
                if not r.ok:
                    raise SystemExit(f"{k} ({w}) failed: {r.reason}")
                res[k, w].append(r.latency.median)
    print(f"{a.net}: median latency (ms) over {a.rounds} interleaved rounds, [each round]")
    for k in maps:
        spin, sleep = (float(np.median(res[k, w])) for w in MODES)
        print(
            f"  {k:9s} spin {spin:8.2f} {np.round(res[k, 'spin'], 1).tolist()}"
            f"  sleep {sleep:8.2f} {np.round(res[k, 'sleep'], 1).tolist()}"
            f"  ({(sleep / spin - 1) * 100:+.1f} %)"
        )


if __name__ == "__main__":
    main()
