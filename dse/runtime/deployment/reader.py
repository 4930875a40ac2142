"""The one reader of a deployment: ``plan.json`` -> :class:`~dse.runtime.deployment.plan.Plan`,
checked before a rank allocates anything, and the whole model's outputs stored beside it
(:func:`read_expected`).

:func:`read_plan` reads the JSON (size, depth, NaN, a key twice), checks its schema
(:meth:`~dse.runtime.deployment.plan.Plan.from_json`) and the rules of
:mod:`dse.runtime.deployment.validate`, and the directory's files: every sub-model (and its weights
file) and the whole model's expected outputs are regular files inside the deployment directory (a
plain name, no symlink), each sub-model's ONNX graph is read for its inputs and outputs, and its
external weights are files of the directory too, within their length. Every problem is one line
naming the field or file.

The one path a plan names outside its directory, ``reference.path`` (the whole model, a file of
the machine that deployed it), is read by no rank and by no check a rank runs: only the
launching machine reads it (the speed probe, the sub-models' timing of a calibration), and only
through :func:`whole_model`, which checks it first.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from dse.errors import DseError
from dse.files import no_constant, no_duplicates
from dse.runtime.deployment.layout import PLAN
from dse.runtime.deployment.plan import FIX, MAX_PLAN_BYTES, Plan
from dse.runtime.deployment.validate import FILE_NAME, SegmentIO, check_io, model_io, validate

#: Largest sub-model graph read (its weights are in its data file; protobuf's own limit).
MAX_SEGMENT_BYTES = 2**31 - 1


def inside(directory: Path, name: str, what: str) -> Path:
    """``directory/name`` where ``name`` is a plain file name and the file a regular file of
    the directory (not a symlink); one line otherwise."""
    if not FILE_NAME.fullmatch(name):
        raise DseError(f"{directory}: {what} '{name[:80]}' is not a plain file name")
    path = Path(directory) / name
    if path.is_symlink():
        raise DseError(f"{path} ({what}) is a symlink: a deployment holds its own files")
    if not path.is_file():
        raise DseError(f"{path} ({what}) is missing: deploy the mapping again")
    return path


def segment_io(directory: Path, names: list[str]) -> SegmentIO:
    """Each sub-model's ONNX inputs and outputs, read from ``directory``, its external weights
    checked to be files of the directory, within their length."""
    out: SegmentIO = {}
    for name in names:
        path = inside(directory, name, "sub-model")
        if path.stat().st_size > MAX_SEGMENT_BYTES:
            raise DseError(f"{path} is larger than a sub-model can be")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError
            raise DseError(f"{path} is not an ONNX model: {exc.__class__.__name__}") from None
        _external(directory, path, model)
        out[name] = model_io(model)
    return out


def _external(directory: Path, path: Path, model: onnx.ModelProto) -> None:
    sizes: dict[str, int] = {}
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        data = inside(directory, info.get("location", ""), f"weights of {path.name}")
        size = sizes.setdefault(data.name, data.stat().st_size)
        try:
            end = int(info.get("offset", 0)) + int(info.get("length", 0))
        except ValueError:
            raise DseError(f"{path}: weight '{t.name}' has no valid offset or length") from None
        if end > size:
            raise DseError(f"{path}: weight '{t.name}' reaches past the end of {data.name}")


def host_memory_bytes() -> int | None:
    """The memory this process may use: the machine's physical memory, or its cgroup's limit
    where lower (an emulated board's memory cap); None where unknown."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if controllers == "":
                candidate = Path("/sys/fs/cgroup") / rel.lstrip("/") / "memory.max"
            elif "memory" in controllers.split(","):
                candidate = (
                    Path("/sys/fs/cgroup/memory") / rel.lstrip("/") / "memory.limit_in_bytes"
                )
            else:
                continue
            text = candidate.read_text().strip() if candidate.is_file() else "max"
            if text.isdigit():
                limits.append(int(text))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def check_files(
    plan: Plan, directory: Path, rank: int | None = None, host_memory: int | None = None
) -> None:
    """:func:`validate` with the deployment directory's files: the expected outputs and the
    sub-models of every rank (or of ``rank``: what a rank reads before it runs)."""
    directory = Path(directory)
    where = str(directory / PLAN)
    if rank is not None and rank >= len(plan.ranks):
        raise DseError(f"{where}: rank {rank} is not in the plan ({len(plan.ranks)} ranks)")
    mine = [r for r in plan.ranks if rank is None or r.rank == rank]
    if plan.reference is None:
        raise DseError(
            f"{where}: no reference: the outputs could not be checked against the whole model "
            "(deploy the mapping again)"
        )
    inside(directory, plan.reference.expected, "the whole model's expected outputs")
    validate(plan, None, host_memory, where)  # the rules first: file names, messages, sizes
    io = segment_io(directory, [n for r in mine for n in r.segments])
    check_io(plan, io, [r.rank for r in mine], where)


def parse_plan_text(text: str | bytes, where: str) -> Any:
    """``plan.json``'s JSON; one line when it is not JSON, too deep, has NaN or a key twice."""
    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except RecursionError:
        raise DseError(f"{where}: nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DseError(f"{where} is not JSON: {exc}") from None
    except ValueError as exc:  # the hooks': NaN, a key twice
        raise DseError(f"{where}: {exc}") from None


def read_plan_json(directory: Path) -> Any:
    """The parsed JSON of ``directory/plan.json`` (no schema check: for the deployment's
    identity and for :func:`read_plan`)."""
    path = Path(directory) / PLAN
    if not path.is_file():
        raise DseError(f"{directory} is not a deployment (no {PLAN}): run python -m dse.deploy")
    try:
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise DseError(f"{path} is {size / 2**20:.0f} MB, more than a plan can be")
        data = path.read_bytes()
    except OSError as exc:
        raise DseError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_plan_text(data, str(path))


def read_plan(directory: Path, rank: int | None = None, host_memory: int | None = None) -> Plan:
    """The checked plan of the deployment in ``directory``: schema, then the rules of
    :func:`dse.runtime.deployment.validate.validate` with the sub-models' own inputs and outputs
    (all of them, or ``rank``'s only) and, given ``host_memory`` (bytes), the rank's buffers bounded
    by it too. One line naming what is wrong, before anything is allocated."""
    directory = Path(directory)
    where = str(directory / PLAN)
    plan = Plan.from_json(read_plan_json(directory), where)
    check_files(plan, directory, rank, host_memory)
    return plan


def whole_model(plan: Plan, directory: Path) -> Path:
    """The whole model ``plan`` names (``reference.path``): an absolute path to a regular file, an
    ONNX model with the plan's inputs and outputs; one line naming the field otherwise."""
    where = str(Path(directory) / PLAN)
    if plan.reference is None:
        raise DseError(f"{where}: no reference: the plan names no whole model ({FIX})")
    shown = plan.reference.path[:200]
    path = Path(plan.reference.path)
    if not path.is_absolute():
        raise DseError(f"{where}: reference.path '{shown}' is not an absolute path ({FIX})")
    if not path.is_file():
        raise DseError(f"{where}: reference.path '{shown}' is not a file here ({FIX})")
    try:
        if path.stat().st_size > MAX_SEGMENT_BYTES:
            raise DseError(f"{where}: reference.path '{shown}' is larger than a model can be")
        model = onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise DseError(f"cannot read {path} (reference.path of {where}): {exc.strerror}") from None
    except Exception:  # noqa: BLE001 - protobuf raises its own DecodeError
        raise DseError(f"{where}: reference.path '{shown}' is not an ONNX model ({FIX})") from None
    ins, outs = model_io(model)
    missing = [p.name for p in plan.inputs if p.name not in ins]
    missing += [o.name for o in plan.outputs if o.name not in outs]
    if missing:
        raise DseError(
            f"{where}: reference.path '{shown}' is not the plan's model: it has no "
            f"'{missing[0][:80]}' ({FIX})"
        )
    return path


def read_expected(plan: Plan, directory: Path) -> list[np.ndarray]:
    """The whole model's outputs stored in the deployment, each of its output's shape and type
    (one line otherwise)."""
    if plan.reference is None:
        raise DseError("the plan names no reference")
    path = inside(directory, plan.reference.expected, "the whole model's expected outputs")
    limit = sum(o.spec.nbytes for o in plan.outputs) + 2**20  # the arrays and npz headers
    if path.stat().st_size > limit:
        raise DseError(f"{path} is larger than the plan's outputs")
    out = []
    try:
        with np.load(path, allow_pickle=False) as z:
            for i, o in enumerate(plan.outputs):
                a = z[f"o{i}"]
                if a.shape != o.shape or a.dtype != np.dtype(o.dtype):
                    raise DseError(f"{path}: output '{o.name}' is not {o.dtype}{list(o.shape)}")
                out.append(a)
    except (OSError, KeyError, ValueError) as exc:
        raise DseError(f"{path} is not the whole model's outputs: {exc}") from None
    return out
