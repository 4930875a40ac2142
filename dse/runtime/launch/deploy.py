"""Deploy one mapping: compile it into sub-models and a plan, add how its ranks start (hostfile,
rankfile, ``run.sh``), and write the deployment directory, ready to launch."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import onnxruntime as ort

from dse.config import ITERATIONS, WARMUP
from dse.errors import DseError
from dse.files import can_write
from dse.mapping import Mappings
from dse.net import Net
from dse.platform import Platform
from dse.runtime.compile.package import check_existing, write_deployment
from dse.runtime.compile.partition import Deployment, partition
from dse.runtime.deployment.layout import HOSTFILE, RANKFILE, RUN_SCRIPT
from dse.runtime.deployment.plan import Plan, RunSettings
from dse.runtime.launch.mpirun import Launcher, check_mpi_path, mpi_files, mpiexec_path
from dse.runtime.launch.reference import reference, reference_outputs


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
    cmd = launcher.command(out, len(plan.ranks), mpiexec=mpiexec, placement=placement)
    plan.command = shlex.join(cmd)
    return {HOSTFILE: hostfile, RANKFILE: rankfile, RUN_SCRIPT: launcher.run_script(cmd, out)}
