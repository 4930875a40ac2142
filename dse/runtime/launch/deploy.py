"""Deploy one mapping: compile it into sub-models and a plan, compute the whole model's outputs on
the plan's input (the reference a run is checked against; cached per model file and input), add
how its ranks start (hostfile, rankfile, ``run.sh``), and write the deployment directory, ready
to launch."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from dse.config import ITERATIONS, WARMUP
from dse.errors import DseError
from dse.files import can_write
from dse.mapping import Mappings
from dse.net import Net, zoo
from dse.net.onnx_load import fix_input_shapes
from dse.net.zoo.materialize import cache_root
from dse.platform import Platform
from dse.records import to_json
from dse.runtime.compile.package import check_existing, write_deployment
from dse.runtime.compile.partition import Deployment, partition
from dse.runtime.deployment.layout import HOSTFILE, RANKFILE, RUN_SCRIPT
from dse.runtime.deployment.plan import Plan, Reference, RunSettings, input_arrays
from dse.runtime.launch.mpiexec import Launcher, check_mpi_path, mpi_files, mpiexec_path
from dse.runtime.rank.sessions import session


def check_gpus(platform: Platform, mapping: Mappings) -> None:
    """A gpu device that mapping 0 uses needs CUDA here (one line otherwise)."""
    used = set(mapping.device[0][mapping.device[0] >= 0].tolist())
    used |= set(np.flatnonzero(mapping.sizes[0].sum(axis=0) > 0).tolist())
    gpus = [dev.name for d, dev in enumerate(platform.devices) if d in used and dev.kind == "gpu"]
    if gpus and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise DseError(
            f"device {gpus[0]} is a gpu but onnxruntime has no CUDA execution provider here: "
            "measure on the boards, or install onnxruntime-gpu"
        )


def deploy(
    net: Net,
    platform: Platform,
    mapping: Mappings,
    out: Path,
    seed: int = 0,
    warmup: int = WARMUP,
    iterations: int = ITERATIONS,
    stream: int = 0,
    launcher: Launcher | None = None,
) -> Plan:
    """Partition mapping 0 of ``mapping`` and write its deployment directory, with the whole
    model's outputs on the plan's input for the ranks to check theirs against; its plan."""
    check_mpi_path(out)
    check_existing(out, net.fingerprint, mapping.ident(0))
    # before the work: a place that cannot be written, or a disk without room for the weights
    can_write(Path(out).expanduser(), "out", int(net.graph.weight_bytes.sum()) + 2**20)
    dep: Deployment = partition(net, mapping, platform, seed=seed)
    dep.plan.reference = reference(net, seed)
    names = [o.name for o in dep.plan.outputs]
    dep.expected = reference_outputs(dep.plan, Path(dep.plan.reference.path), names)
    dep.plan.run = RunSettings(warmup, iterations, stream)
    files = launch_files(dep.plan, platform, Path(out), launcher or Launcher())
    write_deployment(dep, out, files, executable=[RUN_SCRIPT])
    return dep.plan


def launch_files(plan: Plan, platform: Platform, out: Path, launcher: Launcher) -> dict[str, str]:
    """The hostfile, rankfile and ``run.sh`` of ``plan`` deployed at ``out`` (its ranks started
    by ``launcher``), and ``plan.command``: the mpiexec command ``run.sh`` runs."""
    out = Path(out).expanduser().absolute()
    hostfile, rankfile = mpi_files(platform, [r.device_index for r in plan.ranks], launcher)
    try:
        mpiexec = launcher.mpiexec or mpiexec_path()
    except DseError:
        mpiexec = "mpiexec"  # deploying needs no MPI; running it does
    placement = [(r.host, r.device) for r in plan.ranks]
    on_hosts = launcher.remote.directory(out) if launcher.remote is not None else None
    cmd = launcher.command(
        out, len(plan.ranks), mpiexec=mpiexec, placement=placement, on_hosts=on_hosts
    )
    plan.command = shlex.join(cmd)
    return {HOSTFILE: hostfile, RANKFILE: rankfile, RUN_SCRIPT: launcher.run_script(cmd, out)}


def reference(net: Net, seed: int) -> Reference:
    """Where the whole model is (the equivalence check's reference, the speed probe's work)."""
    path = net.path if net.path is not None else zoo.materialize(net.name, seed)
    shape = net.input_shape  # checked at load: one shape, or input name -> shape
    if shape is None or isinstance(shape, list | dict | str | int):
        return Reference(str(path), shape)
    return Reference(str(path), dict(shape) if isinstance(shape, Mapping) else list(shape))


def whole_model_session(plan: Plan, path: Path, threads: int = 1) -> Any:
    """The whole model of a deployment (``plan.reference``) in one cpu session."""
    shape = plan.reference.input_shape if plan.reference is not None else None
    if shape is None:
        model: Any = path  # onnxruntime reads the file itself: no protobuf copy
    else:
        model = onnx.load(path, load_external_data=True)
        fix_input_shapes(model, shape)
    return session(model, "cpu", threads)


def reference_outputs(plan: Plan, path: Path, names: list[str]) -> list[np.ndarray]:
    """The whole model's outputs on the plan's input, computed once per (model file, input)
    and cached (``<zoo cache>/reference/<key>.npz``): building the whole-model session costs
    seconds for a large network, and fidelity and calibration deploy each network several
    times."""
    st = path.stat()
    spec: list[Any] = [str(path.resolve()), st.st_size, st.st_mtime_ns, plan.seed]
    shape = plan.reference.input_shape if plan.reference is not None else None
    spec += [[to_json(p) for p in plan.inputs], shape, names]
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    cache = cache_root() / "reference" / f"{key[:32]}.npz"
    try:
        with np.load(cache, allow_pickle=False) as z:
            return [z[f"o{i}"] for i in range(len(names))]
    except (OSError, KeyError, ValueError):
        pass
    expected = whole_model_session(plan, path).run(names, input_arrays(plan))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.stem}.{os.getpid()}.tmp.npz")
        arrays = {f"o{i}": np.asarray(e) for i, e in enumerate(expected)}
        # numpy's stub lets **kwds fill allow_pickle: bool, so a dict of arrays fails it
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, cache)
    except OSError:
        pass  # no cache: computed again next time
    return expected
