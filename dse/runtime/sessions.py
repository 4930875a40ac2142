"""onnxruntime sessions as a device runs them: its thread count, spinning off, CPU or CUDA."""

from __future__ import annotations

from pathlib import Path

import onnx

from dse.errors import DseError


def session(model: onnx.ModelProto | str | Path, kind: str = "cpu", threads: int = 1):
    """An InferenceSession for one sub-model on a ``cpu`` (``threads`` intra-op threads, no
    spinning, so several sessions in one process do not spin against each other) or ``gpu``
    device (CUDA execution provider; one clear error where CUDA is not available)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads)
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    opts.log_severity_level = 3
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
    return ort.InferenceSession(source, opts, providers=providers)
