"""A deployment directory written all or nothing: sub-models, ``plan.json``, the whole model's
expected outputs, and the files the launching side adds (how its ranks start).

Everything is written to a temporary directory beside the target and renamed onto it at the
end, so a full disk or a crash leaves no half-written deployment. A directory holding another
net's or mapping's deployment is refused rather than overwritten. This is the one writer of
``plan.json`` (:meth:`dse.runtime.deployment.plan.Plan.dumps`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np

from dse.errors import DseError
from dse.files import LOCK, owned, temporary_files
from dse.runtime.compile.partition import Deployment
from dse.runtime.deployment.layout import PLAN, RUN_OUTPUTS
from dse.runtime.deployment.reader import read_plan_json


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
    out: Path,
    files: Mapping[str, str] | None = None,
    executable: Collection[str] = (),
) -> Path:
    """Write ``deployment`` (its plan as it is) and ``files`` (name -> text; those named in
    ``executable`` runnable) to ``out`` atomically; return ``out``."""
    out = Path(out).expanduser().absolute()
    plan = deployment.plan
    check_existing(out, plan.fingerprint, plan.mapping_hash)  # before a directory is made
    if plan.reference is None or deployment.expected is None:
        raise DseError("a deployment needs the whole model's outputs to check its own")
    created = not out.exists()
    try:
        with owned(out, "out= directory"):  # one writer; checked again now that it is ours
            check_existing(out, plan.fingerprint, plan.mapping_hash)
            return _write(deployment, out, dict(files or {}), set(executable))
    except BaseException:
        if created and [p.name for p in out.iterdir()] == [LOCK]:  # a failure leaves nothing
            shutil.rmtree(out, ignore_errors=True)
        raise


def _write(deployment: Deployment, out: Path, files: dict[str, str], executable: set[str]) -> Path:
    """Write the deployment into a directory beside ``out``, then move its files into ``out``
    (the plan last): the files of an earlier deployment of the same mapping are replaced, its
    stale measurements removed, and files a deployment does not write (the user's) kept."""
    plan = deployment.plan
    assert plan.reference is not None and deployment.expected is not None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise DseError(f"cannot write to {out.parent}: {exc.strerror or exc}") from None
    # removed however this ends: a failure, Ctrl-C, or (at the next start) a kill
    with temporary_files(out.parent, [tmp.name]):
        try:
            deployment.write_segments(tmp)
            arrays = {f"o{i}": np.asarray(a) for i, a in enumerate(deployment.expected)}
            # read_expected reads them; numpy's stub lets **kwds fill allow_pickle: bool
            np.savez(tmp / plan.reference.expected, **arrays)  # type: ignore[arg-type]
            for name, text in files.items():
                (tmp / name).write_text(text)
                if name in executable:
                    os.chmod(tmp / name, 0o755)
            (tmp / PLAN).write_text(plan.dumps())
            os.chmod(out, 0o755)
            for stale in RUN_OUTPUTS:
                (out / stale).unlink(missing_ok=True)  # an earlier run's, of this deployment
            for f in sorted(tmp.iterdir(), key=lambda f: f.name == PLAN):  # the plan last
                os.replace(f, out / f.name)
        except OSError as exc:
            raise DseError(
                f"cannot write the deployment to {out}: {exc.strerror or exc} "
                "(nothing was left behind; free space or choose another out=)"
            ) from None
    return out
