"""The same mappings measured on boards with disks of their own and on a shared disk, interleaved.

On a running emulated cluster, each mapping is deployed twice: under ``--shared-dir`` (a folder
the boards see at its path, as a shared file system: runs copy nothing, ``reach.shared_disk``)
and under a temporary folder of this machine, which the boards do not see (each run ships it to
their own disks first). Each round runs every (mapping, disk) pair once, in a new random order;
the figures are each pair's median latency over the rounds, and per mapping the ratio of the
shipped run's to the shared run's with the spread of that ratio over the rounds.

Needs root and the cluster up; run it on a quiet machine.

    python scripts/bench_disks.py                          # VGG-16 on edge3_ethernet
    python scripts/bench_disks.py --net alexnet --rounds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import statistics
import tempfile
from pathlib import Path

import yaml

from dse.cluster import launcher_for
from dse.mapping import from_device_lists
from dse.net import load_net
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import launch


def mappings(net, n: int) -> dict[str, object]:
    """Three mappings over ``n`` devices: all on the first, every splittable layer over all,
    and the layers cut into ``n`` consecutive stages, the last (a CNN's heaviest weights) on
    the first device (on edge3, the largest memory cap)."""
    g = net.graph
    k = len(g)
    lists = {
        "one device": [[0] for _ in range(k)],
        "every layer split": [list(range(n)) if g.splittable[i] else [0] for i in range(k)],
        "stages": [[n - 1 - min(n - 1, i * n // k)] for i in range(k)],
    }
    return {name: from_device_lists(g, n, [dl]) for name, dl in lists.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", default="edge3_ethernet")
    parser.add_argument("--net", default="vgg16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--shared-dir", type=Path, default=Path("/var/lib/dse-bench-shared"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = yaml.safe_load((CONF_DIR / "platform" / f"{args.platform}.yaml").read_text())
    platform = load_platform(cfg)
    net = load_net({"name": args.net})
    shipping = launcher_for(cfg)
    shared = dataclasses.replace(shipping, remote=None)
    rng = random.Random(args.seed)
    args.shared_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dse-bench-disks-"))
    try:
        runs = {}
        for name, mapping in mappings(net, len(platform.devices)).items():
            slug = name.replace(" ", "-")
            for disk, launcher, root in (
                ("own", shipping, tmp),
                ("shared", shared, args.shared_dir),
            ):
                out = root / slug
                deploy(net, platform, mapping, out, warmup=2, iterations=args.iterations,
                       launcher=launcher)  # fmt: skip
                runs[(name, disk)] = (out, launcher)
        latency: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
        for r in range(args.rounds):
            order = list(runs)
            rng.shuffle(order)
            for key in order:
                out, launcher = runs[key]
                result = launch(out, launcher=launcher)
                assert result.status == "ok" and result.latency_ms, (key, result.reason)
                latency[key].append(result.latency_ms.median)
            print(f"round {r + 1} of {args.rounds} done", flush=True)
        print(f"{args.net} on {args.platform}, {args.rounds} interleaved rounds of "
              f"{args.iterations} iterations; latency medians (ms)")  # fmt: skip
        for name in {k[0]: None for k in runs}:
            own, sh = latency[(name, "own")], latency[(name, "shared")]
            ratios = [a / b for a, b in zip(own, sh, strict=True)]
            print(f"  {name:18s} own disks {statistics.median(own):8.1f}  shared disk "
                  f"{statistics.median(sh):8.1f}  ratio {statistics.median(ratios):.3f} "
                  f"(rounds {min(ratios):.3f}-{max(ratios):.3f})")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(args.shared_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
