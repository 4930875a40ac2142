"""Shipping deployments to boards with disks of their own, on a running emulated cluster.

1. The preflight of the cluster's boards over ssh (``dse.cluster check``'s last part): its time
   (target: under 5 s for two boards), ``--rounds`` times.
2. A VGG-16 mapping over every device of the platform (every splittable layer split over all
   of them): per board, the bytes of the files its ranks read (summed here from the plan's
   files) beside the bytes rsync sent, the time to ship beside the measured latency; then the
   same mapping deployed again: what it sends (target: nothing).

Needs root and the cluster up (``python -m dse.cluster up platform=edge3_ethernet``); run it on a
quiet machine.

    python scripts/bench_ship.py                            # edge3_ethernet, VGG-16
    python scripts/bench_ship.py --net alexnet --rounds 1   # a quick check
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from dse.cluster import launcher_for
from dse.cluster.hosts import ssh_command
from dse.cluster.state import load
from dse.mapping import from_device_lists
from dse.net import load_net
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import launch
from dse.runtime.launch.preflight import memory_by_host, preflight
from dse.runtime.launch.ship import Remote, host_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", default="edge3_ethernet")
    parser.add_argument("--net", default="vgg16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    cfg = yaml.safe_load((CONF_DIR / "platform" / f"{args.platform}.yaml").read_text())
    state = load(cfg["name"])
    boards = [b.name for b in state.spec.boards]
    memory = memory_by_host((d.board, d.memory_mb) for d in state.spec.devices)
    remote = Remote(ssh=ssh_command(state.names))
    times = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        result = preflight(remote, memory)
        times.append(time.perf_counter() - t)
        assert result.ok, [p.line() for p in result.problems]
    print(f"preflight of {len(boards)} boards: median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, {args.rounds} rounds)")  # fmt: skip

    platform = load_platform(cfg)
    net = load_net({"name": args.net})
    n = len(platform.devices)
    g = net.graph
    lists = [[list(range(n)) if g.splittable[i] else [0] for i in range(len(g))]]
    mapping = from_device_lists(g, n, lists)
    launcher = launcher_for(cfg)
    with tempfile.TemporaryDirectory(prefix="dse-bench-ship-") as tmp:
        out = Path(tmp) / args.net
        plan = deploy(net, platform, mapping, out, warmup=2, iterations=args.iterations,
                      launcher=launcher)  # fmt: skip
        for label in ("first run", "deployed again"):
            if label == "deployed again":
                deploy(net, platform, mapping, out, warmup=2, iterations=args.iterations,
                       launcher=launcher)  # fmt: skip
            result = launch(out, launcher=launcher)
            assert result.status == "ok", result.reason
            shipped = yaml.safe_load((out / "shipped.json").read_text())
            ms = result.latency_ms.median if result.latency_ms else float("nan")
            print(f"{args.net} over {n} devices, {label}: latency {ms:.1f} ms "
                  f"(median of {args.iterations})")  # fmt: skip
            for h in shipped["hosts"]:
                files = host_files(plan, out, h["host"])
                read = sum((out / f).stat().st_size for f in files)
                print(f"  {h['host']}: {len(files)} files its ranks read, {read:,} B; "
                      f"sent {h['sent_bytes']:,} B in {h['seconds']:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
