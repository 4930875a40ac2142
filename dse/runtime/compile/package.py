"""A deployment directory: sub-models, plan.json, the whole model's expected outputs, hostfile,
rankfile and run.sh, all or nothing.

Everything is written to a temporary directory beside the target and renamed onto it at the
end, so a full disk or a crash leaves no half-written deployment. A directory holding another
net's or mapping's deployment is refused rather than overwritten. This is the one writer of
``plan.json`` (:meth:`dse.runtime.plan.Plan.dumps`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path

from dse.errors import DseError
from dse.files import LOCK, owned, temporary_files
from dse.platform import Platform
from dse.runtime.comparison import COMPARISON
from dse.runtime.equivalence import write_expected
from dse.runtime.measurements import MEASUREMENTS
from dse.runtime.mpirun import (
    HOSTFILE,
    RANKFILE,
    RUN_SCRIPT,
    Launcher,
    mpi_files,
    mpiexec_path,
)
from dse.runtime.partition import Deployment
from dse.runtime.plan import PLAN, RunSettings
from dse.runtime.reader import read_plan_json


def check_existing(out: Path, fingerprint: str, mapping: str) -> None:
    """Before any work: ``out`` must be new, empty, or this net's and mapping's deployment."""
    out = Path(out).expanduser()
    if not out.exists():
        return
    if not out.is_dir():
        raise DseError(f"out={out} is a file: give a directory")
    if (out / PLAN).is_file():
        doc = read_plan_json(out)
        ident = doc if isinstance(doc, dict) else {}
        if ident.get("fingerprint") != fingerprint:
            raise DseError(
                f"{out} holds a deployment of net '{ident.get('net')}' "
                f"(fingerprint {ident.get('fingerprint')}), not of this net ({fingerprint}): "
                "choose another out= directory"
            )
        if ident.get("mapping_hash") != mapping:
            raise DseError(
                f"{out} holds a deployment of another mapping "
                f"({ident.get('mapping_hash')}, this one is {mapping}): choose another out= "
                "directory"
            )
    elif any(p.name != LOCK for p in out.iterdir()):
        raise DseError(f"out={out} is not empty and holds no deployment: choose another one")


def write_deployment(
    deployment: Deployment,
    platform: Platform,
    out: Path,
    run: RunSettings | None = None,
    launcher: Launcher | None = None,
) -> Path:
    """Write ``deployment`` to ``out`` atomically (its plan gains ``run`` and the command that
    runs it; ``launcher``: how, default mpiexec on the platform's hosts); return ``out``."""
    out = Path(out).expanduser().absolute()
    plan = deployment.plan
    check_existing(out, plan.fingerprint, plan.mapping_hash)  # before a directory is made
    if plan.reference is None or deployment.expected is None:
        raise DseError("a deployment needs the whole model's outputs to check its own")
    created = not out.exists()
    try:
        with owned(out, "out= directory"):  # one writer; checked again now that it is ours
            check_existing(out, plan.fingerprint, plan.mapping_hash)
            return _write(deployment, platform, out, run, launcher or Launcher())
    except BaseException:
        if created and [p.name for p in out.iterdir()] == [LOCK]:  # a failure leaves nothing
            shutil.rmtree(out, ignore_errors=True)
        raise


def _write(
    deployment: Deployment,
    platform: Platform,
    out: Path,
    run: RunSettings | None,
    launcher: Launcher,
) -> Path:
    """Write the deployment into a directory beside ``out``, then move its files into ``out``
    (the plan last): the files of an earlier deployment of the same mapping are replaced, its
    stale measurements removed, and files a deployment does not write (the user's) kept."""
    plan = deployment.plan
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise DseError(f"cannot write to {out.parent}: {exc.strerror or exc}") from None
    # removed however this ends: a failure, Ctrl-C, or (at the next start) a kill
    with temporary_files(out.parent, [tmp.name]):
        try:
            deployment.write_segments(tmp)
            write_expected(tmp / plan.reference.expected, deployment.expected)
            devices = [r.device_index for r in plan.ranks]
            hostfile, rankfile = mpi_files(platform, devices, launcher)
            (tmp / HOSTFILE).write_text(hostfile)
            (tmp / RANKFILE).write_text(rankfile)
            try:
                mpiexec = launcher.mpiexec or mpiexec_path()
            except DseError:
                mpiexec = "mpiexec"  # deploying needs no MPI; running it does
            placement = [(r.host, r.device) for r in plan.ranks]
            cmd = launcher.command(out, len(plan.ranks), mpiexec=mpiexec, placement=placement)
            if run is not None:
                plan.run = run
            plan.command = shlex.join(cmd)
            (tmp / RUN_SCRIPT).write_text(launcher.run_script(cmd, out))
            os.chmod(tmp / RUN_SCRIPT, 0o755)
            (tmp / PLAN).write_text(plan.dumps())
            os.chmod(out, 0o755)
            for stale in (MEASUREMENTS, COMPARISON, "stdout.log", "stderr.log"):
                (out / stale).unlink(missing_ok=True)  # an earlier run's, of this deployment
            for f in sorted(tmp.iterdir(), key=lambda f: f.name == PLAN):  # the plan last
                os.replace(f, out / f.name)
        except OSError as exc:
            raise DseError(
                f"cannot write the deployment to {out}: {exc.strerror or exc} "
                "(nothing was left behind; free space or choose another out=)"
            ) from None
    return out


#: A deployment's sub-models and their weights: what a measured deployment need not keep (a
#: VGG-16 deployment holds all 528 MB of its weights again); plan, logs and figures stay.
#: Phase two and fidelity mark them temporary (:func:`dse.files.temporary_files`).
SUBMODELS = ("*.onnx", "*.onnx.data")
