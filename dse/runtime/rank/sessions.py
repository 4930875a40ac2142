"""onnxruntime sessions as a device runs them: its thread count, spinning off, CPU or CUDA, and
on an emulated device of a CPU share, paced to the device's speed (:mod:`dse.runtime.rank.pace`).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import onnx
import onnxruntime as ort

from dse.errors import DseError
from dse.runtime.rank.pace import paced


@cache
def shared_cpu_arena() -> None:
    """Register one CPU arena for every session of this process. Each session otherwise keeps
    its own arena at the peak of its own activations, so a rank running 200 segments held 300
    MB more than it ever had live; shared, a rank's activation memory is its liveness peak, as
    the model assumes. Chunks are sized as requested (no power-of-two growth)."""
    info = ort.OrtMemoryInfo(
        "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
    )
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))


def session_options(kind: str = "cpu", threads: int = 1):
    """The options every session of a device runs with: ``threads`` intra-op threads, no
    spinning (several sessions in one process must not spin against each other) and, on a
    cpu, the process's shared arena."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads)
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    opts.log_severity_level = 3
    if kind != "gpu":
        shared_cpu_arena()
        opts.add_session_config_entry("session.use_env_allocators", "1")
    return opts


def session(model: onnx.ModelProto | str | Path, kind: str = "cpu", threads: int = 1):
    """An InferenceSession for one sub-model on a ``cpu`` or ``gpu`` device (CUDA execution
    provider; one clear error where CUDA is not available), with :func:`session_options`,
    :func:`paced` on an emulated device."""
    opts = session_options(kind, threads)
    if kind == "gpu":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise DseError(
                "a gpu device needs onnxruntime's CUDA execution provider, which is not "
                "available here: install onnxruntime-gpu with CUDA, or map to cpu devices"
            )
        providers = ["CUDAExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        built = ort.InferenceSession(source, opts, providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own classes (Fail, InvalidGraph, ...)
        line = unsupported(str(exc), model)
        if line is None:
            raise
        raise DseError(line) from None
    return paced(built)


#: onnxruntime's words for a model stamped with an opset newer than it runs, and for an op it has
#: not at the model's opset.
_OPSET = re.compile(r"Opset (\d+) is under development.*domain (\S+) is till opset (\d+)")
_NO_OP = re.compile(
    r'In Node, \("([^"]*)", (\w+), "([^"]*)".*No Op registered for \w+ with '
    r"domain_version of (\d+)"
)


def unsupported(message: str, model: onnx.ModelProto | str | Path) -> str | None:
    """One line for onnxruntime's refusal ``message`` of ``model`` when it is an opset or an op
    this onnxruntime does not run, naming the op, the opset and the fix; None for any other
    failure."""
    what = "the model" if isinstance(model, onnx.ModelProto) else str(model)
    version = ort.__version__
    if m := _OPSET.search(message):
        opset, domain, most = m.groups()
        needs = newer_ops(model, int(opset), int(most))
        why = f"its {needs} needs it" if needs else f"none of its ops needs more than {most}"
        return (
            f"{what} imports {domain} opset {opset} ({why}); onnxruntime {version} runs up to "
            f"opset {most}: export the model at opset {most} or lower, or upgrade onnxruntime"
        )
    if m := _NO_OP.search(message):
        node, op, domain, opset = m.groups()
        return (
            f"{what}: onnxruntime {version} has no {op} at {domain or 'ai.onnx'} opset {opset} "
            f"(node '{node}'): export the model at an opset that has {op}"
        )
    return None


def newer_ops(model: onnx.ModelProto | str | Path, opset: int, most: int) -> str | None:
    """The first op of ``model`` (ai.onnx) whose version at ``opset`` is newer than ``most``,
    as ``Op (node 'name', opset N)``; None when every op has a version up to ``most``."""
    try:
        proto = (
            model
            if isinstance(model, onnx.ModelProto)
            else onnx.load(str(model), load_external_data=False)
        )
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: onnxruntime read it, onnx may not
        return None
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            since = onnx.defs.get_schema(node.op_type, opset, "").since_version
        except onnx.defs.SchemaError:
            continue
        if since > most:
            return f"{node.op_type} (node '{node.name}', opset {since})"
    return None
