"""A link's table on an emulated cluster, quiet and beside a busy loop on one of the machine's CPUs.

    python -m dse.cluster up platform=edge3_wifi
    python scripts/link_busy.py [--platform edge3_wifi] [--cpu 1] [--rounds 2]

Calibration's link benchmark (:func:`dse.calibrate.links.measure_link`: MPI ping-pongs through
the boards' namespaces, cgroups and shaped ports, as deployments run) between the first pair of
devices on two boards, messages up to ``--max-bytes``, in rounds that alternate: quiet, then
with a busy loop pinned to ``--cpu`` (an ordinary process of the machine, outside the
cluster's cgroups). Prints the one-way time by size of each (median over rounds) and the
small-message step calibration warns of (:func:`dse.calibrate.links.small_message_step`).
Measures, so run it on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

from dse.cli import fail

BUSY = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--platform", default="edge3_wifi", help="a platform whose cluster is up")
    ap.add_argument("--cpu", type=int, default=1, help="the CPU the busy loop holds")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each, alternating")
    ap.add_argument("--max-bytes", type=int, default=4 << 20, help="the largest message")
    args = ap.parse_args()
    if args.cpu not in os.sched_getaffinity(0):
        fail(f"--cpu {args.cpu} is not a CPU of this machine: give one of "
             f"{sorted(os.sched_getaffinity(0))}")  # fmt: skip
    if args.rounds < 1 or args.max_bytes < 1 << 20:
        fail("--rounds must be at least 1 and --max-bytes at least 1048576 (the bandwidth's sizes)")

    from hydra import compose, initialize_config_dir

    from dse import app
    from dse.calibrate.links import link_pairs, measure_link, small_message_step
    from dse.config import register
    from dse.errors import DseError
    from dse.paths import CONF_DIR

    register()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", [f"platform={args.platform}"])
        platform = app.platform_from(cfg)
        launcher = app.launcher_from(cfg)
    except DseError as exc:
        fail(str(exc))
    pairs = link_pairs(platform)
    if "network" not in pairs:
        fail(f"platform {args.platform} has one board: no link between boards to measure")
    a, b = pairs["network"]
    tables: dict[str, list[dict]] = {"quiet": [], "busy": []}
    for r in range(args.rounds):
        for name in tables:
            print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr)
            busy = None
            if name == "busy":
                busy = subprocess.Popen([sys.executable, "-c", BUSY, str(args.cpu)])
            try:
                tables[name].append(
                    measure_link(platform, a, b, launcher=launcher, max_bytes=args.max_bytes)
                )
            except DseError as exc:
                fail(str(exc))
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    sizes = tables["quiet"][0]["bytes"]
    one = {k: np.median([t["one_way_s"] for t in v], axis=0) for k, v in tables.items()}
    pair = f"{platform.devices[a].name} -> {platform.devices[b].name}"
    print(f"{args.platform}, {pair}: one-way ms, median of {args.rounds} rounds "
          f"(busy: a loop on CPU {args.cpu})")  # fmt: skip
    print(f"{'bytes':>9}  {'quiet':>9}  {'busy':>9}")
    for i, x in enumerate(sizes):
        print(f"{x:>9}  {one['quiet'][i] * 1e3:9.3f}  {one['busy'][i] * 1e3:9.3f}")
    for name, seconds in one.items():
        step = small_message_step({"bytes": sizes, "one_way_s": list(seconds)})
        said = "none" if step is None else (
            f"{step['bytes'] / 1024:g} kB in {step['seconds'] * 1e3:.2f} ms, "
            f"its line {step['line_s'] * 1e3:.2f} ms"
        )  # fmt: skip
        print(f"small-message step, {name}: {said}")


if __name__ == "__main__":
    main()
