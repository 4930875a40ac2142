"""onnxruntime sessions as a device runs them: its thread count, spinning off, CPU or CUDA, and
on an emulated device of a CPU share, paced to the device's speed (:mod:`dse.runtime.pace`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import onnx
import onnxruntime as ort

from dse.errors import DseError
from dse.runtime.pace import paced


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
    return paced(ort.InferenceSession(source, opts, providers=providers))
