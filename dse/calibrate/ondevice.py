"""The compute step's measurements of one device type, taken on a device of that type.

A calibration profiles each device type on a device of it (:mod:`dse.calibrate.compute` fits
what is measured here). A measurement is a **unit** of work, a JSON request answered by a
JSON result, so it runs the same in this process or as a rank on the device:

``profile``
    one network run whole under onnxruntime's profiler (:func:`dse.calibrate.profile.
    profile_model`), profiled once more when its runs spread more than :data:`CONTAMINATED`:
    its per-layer times (scaled to add up to the whole run), the whole runs, and the process's
    CPU time against its wall time;
``channels``
    the one-Conv models of :func:`dse.calibrate.channels.measure_channel_scaling`;
``parts``
    each splittable layer of one network alone, whole and as parts
    (:func:`dse.calibrate.channels.measure_part_costs`), skipping the layer keys of ``seen``;
``bands``
    each row-splittable convolution of one network alone, whole and as bands of its output
    rows (:func:`dse.calibrate.bands.measure_band_costs`), skipping the layer keys of ``seen``;
``submodels``
    each sub-model of a deployment directory alone, every round also the whole network
    (:func:`dse.runtime.rank.inprocess.time_files`): what running work as sub-models costs. On
    a host with a disk of its own, the deployment and the whole model are shipped there first
    (:func:`dse.runtime.launch.ship.ship_whole`), and a network to profile is made here and
    shipped (:func:`dse.runtime.launch.ship.ship_model`): on a board's disk, not in its
    device's memory.

:func:`unit_runner` says where a type's units run: in this process when its device is this
machine and ranks start without a rank wrapper (``localhost``: as calibration always did),
else as one rank on the device (``mpiexec -n 1`` through the platform's launcher: on an
emulated cluster inside the device's cgroups and its board's namespace, its CPU share and
memory cap; on real boards over ssh). The rank prints its result as one line of its stdout
(which mpiexec brings back from any board) after :data:`MARK`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from dse.calibrate.bands import measure_band_costs
from dse.calibrate.channels import measure_channel_scaling, measure_part_costs
from dse.calibrate.profile import profile_model
from dse.errors import DseError
from dse.files import scratch
from dse.net import Net, load_net, zoo
from dse.net.zoo.materialize import cache_root
from dse.platform import Platform
from dse.runtime.deployment.layout import HOSTFILE, RANKFILE
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.deployment.reader import read_plan, whole_model
from dse.runtime.launch.mpiexec import Launcher, captured, mpi_files, placement
from dse.runtime.launch.probe import LOCAL_HOSTS
from dse.runtime.launch.ship import ship_model, ship_whole
from dse.runtime.rank.pace import pace_from_env

#: A network profiled with a larger whole-run spread than this is profiled once more.
CONTAMINATED = 0.15
#: What precedes the result on the rank's stdout.
MARK = "dse-calibrate-unit: "
#: A unit's run on a device is stopped after this long (VGG-16's parts take minutes).
UNIT_TIMEOUT_S = 3600.0

#: A unit's request in, its result out (JSON-shaped).
Unit = dict[str, Any]


def machine_state() -> dict[str, Any]:
    """The machine's load and this process's CPU time now (kept beside each profile)."""
    return {
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpu_s": round(time.process_time(), 2),
        "wall": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def net_of_request(r: Unit) -> Net:
    """The network a unit's request names (:func:`dse.calibrate.settings.net_request`)."""
    return load_net(r.get("net_config") or {"name": r["net"]})


def model_file(r: Unit) -> Path:
    """The ONNX file a request's network runs from: a zoo network made here with seeded
    weights, or a copy of a user's file with its inputs' shapes fixed (in the zoo's cache)."""
    config = r.get("net_config")
    if not config:
        return zoo.materialize(r["net"], int(r["seed"]), external=True)
    net = net_of_request(r)
    assert net.path is not None  # a net config has a path
    key = hashlib.sha256(f"{net.path}:{net.path.stat().st_mtime_ns}:{net.fingerprint}".encode())
    copy = cache_root() / "fixed" / f"{net.name}-{key.hexdigest()[:16]}.onnx"
    if copy.is_file():
        return copy
    try:  # both files in a private folder, then moved, the model last: it marks the cache
        copy.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{copy.stem}.", dir=copy.parent) as tmp:
            onnx.save(net.weighted_model(), str(Path(tmp) / copy.name),
                      save_as_external_data=True, location=f"{copy.name}.data")  # fmt: skip
            for name in (f"{copy.name}.data", copy.name):  # no data file: weights inline
                if (Path(tmp) / name).exists():  # (typed fields, as PaddlePaddle's exports)
                    os.replace(Path(tmp) / name, copy.parent / name)
    except OSError as exc:
        raise DseError(
            f"cannot write a copy of {net.path} with its input shapes fixed into {copy.parent} "
            f"({exc.strerror or exc}): free space there, or set DSE_CACHE to another folder"
        ) from None
    return copy


def profile_unit(r: Unit) -> Unit:
    """``profile``: ``net``, ``seed``, ``threads``, ``warmup``, ``runs`` and ``prior_rate``
    (MACs per second of the prior that shares a fused kernel's time among its layers), and
    ``model`` (the network's file, where not made here by :func:`dse.net.zoo.materialize`)."""
    g = net_of_request(r).graph
    prior = g.macs / float(r["prior_rate"]) + g.output_bytes / 1e10
    # ``model``: where the network was shipped to a host with a disk of its own
    path = Path(r["model"]) if r.get("model") else model_file(r)  # see profile_model
    pace = pace_from_env()
    sliced = pace is not None and pace.speed is not None  # a CPU share of an emulated cluster
    for attempt in range(2):
        before = machine_state()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        prof = profile_model(
            path, g, prior, int(r["threads"]), warmup=r["warmup"], runs=r["runs"],
            by_mean=sliced,
        )  # fmt: skip
        # below 1 / threads, this process did not get its cores: other work ran beside it
        cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        whole = float(np.median(prof.whole_s))
        spread = float(np.percentile(prof.whole_s, 90) - np.percentile(prof.whole_s, 10)) / whole
        if spread <= CONTAMINATED or attempt == 1:
            break
    scaled = prof.layer_s * (whole / max(prof.layer_s.sum(), 1e-12))
    return {
        "layer_s": [float(t) for t in scaled],
        "whole_s": [float(t) for t in prof.whole_s],
        "spread": spread,
        "kernels": prof.kernels,
        "unmapped": list(prof.unmapped),
        "profiled_again": attempt == 1,
        "time_sliced": sliced,
        "cpu_over_wall": cpu_share,
        "machine_before": before,
        "machine_after": machine_state(),
    }


def channels_unit(r: Unit) -> Unit:
    """``channels``: ``threads``, ``repeats``."""
    return {"rows": measure_channel_scaling(int(r["threads"]), int(r["repeats"]))}


def parts_unit(r: Unit) -> Unit:
    """``parts``: ``net``, ``block``, ``threads``, ``repeats``, ``seen`` (layer keys)."""
    seen = set(r.get("seen", []))
    net = net_of_request(r)
    rows = measure_part_costs(net, int(r["block"]), int(r["threads"]), int(r["repeats"]), seen)
    return {"rows": rows}


def bands_unit(r: Unit) -> Unit:
    """``bands``: ``net``, ``threads``, ``repeats``, ``seen`` (layer keys)."""
    seen = set(r.get("seen", []))
    net = net_of_request(r)
    return {"rows": measure_band_costs(net, int(r["threads"]), int(r["repeats"]), seen)}


def submodels_unit(r: Unit) -> Unit:
    """``submodels``: ``directory`` (a deployment's), ``runs``, ``warmup``, ``threads``, and
    ``whole`` (the whole model's path, where not the plan's own)."""
    # imported here: it brings the model's kernel (numba and its compiler) into a process
    # whose other units run on devices of little memory
    from dse.runtime.launch.deploy import whole_model_session
    from dse.runtime.rank.timing import beside, time_files

    directory = Path(r["directory"])
    plan = read_plan(directory)
    # ``whole``: where the whole model was shipped to a host with a disk of its own
    path = Path(r["whole"]) if r.get("whole") else whole_model(plan, directory)
    whole = whole_model_session(plan, path, int(r["threads"]))  # its input shape fixed
    run_whole, whole_s = beside(whole)
    names = [n for rank in plan.ranks for n in rank.segments]
    timed = time_files(
        directory, names, int(r["runs"]), int(r["warmup"]), int(r["threads"]), run_whole
    )
    return {"segments": timed, "whole_s": float(np.median(whole_s))}


UNITS: dict[str, Callable[[Unit], Unit]] = {
    "profile": profile_unit,
    "channels": channels_unit,
    "parts": parts_unit,
    "bands": bands_unit,
    "submodels": submodels_unit,
}


def measure_unit(request: Unit) -> Unit:
    """Do the unit ``request`` here: its result."""
    return UNITS[request["step"]](request)


class UnitFailed(DseError):
    """A unit that failed on its device, with the run's reason (its device's OOM kill, ...)."""


def profiles_here(platform: Platform, device: int, launcher: Launcher) -> bool:
    """Whether the units of ``device``'s type run in this process (see the module)."""
    return launcher.rank_wrapper is None and platform.devices[device].host in LOCAL_HOSTS


def unit_runner(
    platform: Platform, device: int, launcher: Launcher
) -> tuple[Callable[[Unit], Unit], bool]:
    """How units of ``device``'s type run, and whether that is in this process."""
    if profiles_here(platform, device, launcher):
        return measure_unit, True
    return (lambda request: run_on_device(platform, device, launcher, request)), False


def run_on_device(
    platform: Platform,
    device: int,
    launcher: Launcher,
    request: Unit,
    timeout_s: float = UNIT_TIMEOUT_S,
) -> Unit:
    """The unit ``request`` run as one rank on ``device`` (its host and cores, as a
    deployment binds them, started by ``launcher``); a :class:`UnitFailed` naming the cause
    when it fails."""
    dev = platform.devices[device]
    remote, host = launcher.remote, launcher.host(dev.host)
    if remote is not None and "directory" in request:  # the host has a disk of its own
        directory = Path(request["directory"])
        there, whole = ship_whole(directory, read_plan(directory), remote, host)
        request = {**request, "directory": there, "whole": whole}
    elif remote is not None and request.get("net_config"):  # a user's file, read there
        there = ship_model(model_file(request), remote, host)
        request = {**request, "model": there, "net_config": {"name": "onnx", "path": there}}
    elif remote is not None and request["step"] == "profile":  # made here, read there
        request = {**request, "model": ship_model(model_file(request), remote, host)}
    with scratch("unit-") as d:  # removed even after a kill, at the next start
        hostfile, rankfile = mpi_files(platform, [device], launcher)
        (d / HOSTFILE).write_text(hostfile)
        (d / RANKFILE).write_text(rankfile)
        program = [sys.executable, "-m", "dse.calibrate.ondevice", json.dumps(request)]
        ranks = placement(platform, [device])
        cmd = launcher.mpiexec_command(1, d, program, placement=ranks)
        with launcher.watched(ranks) as finish:
            try:
                proc = captured(cmd, launcher.environment(), timeout_s)
                lines = [x for x in proc.stdout.splitlines() if x.startswith(MARK)]
                if proc.returncode == 0 and lines:
                    return json.loads(lines[-1][len(MARK) :])
                tail = [x for x in proc.stderr.strip().splitlines() if x.strip()][-3:]
                why = f"exit status {proc.returncode}: " + (" | ".join(tail) or "no stderr")
            except subprocess.TimeoutExpired:
                why = f"timed out after {timeout_s:g} s"
            result = Measurement.failed(why)
            reason = finish(result).reason
            raise UnitFailed(f"{request['step']} on {dev.name}: {reason}")


def main(argv: list[str] | None = None) -> int:
    """``python -m dse.calibrate.ondevice REQUEST``: do the unit (a JSON request) and print
    its result after :data:`MARK`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m dse.calibrate.ondevice REQUEST (one JSON object)")
    result = measure_unit(json.loads(args[0]))
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
