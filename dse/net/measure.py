"""Measure tensor shapes by running a model once in onnxruntime, in a child process on a budget.

The fallback where static inference cannot see through a graph (custom ops, computed resize
scales, data-dependent shapes). A hostile or broken model can ask for gigabytes or minutes from a
few hundred bytes, so the run happens in a separate process with an address-space limit
(``RLIMIT_AS``) and a wall-clock timeout; exceeding either is one clear line.

Run as a script (``python -I measure.py MODEL NAMES``) it is the child: it imports only numpy,
onnx and onnxruntime, runs the model on zero inputs and prints ``{name: [shape, elem_type]}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

#: What the child reports when an allocation failed (the budget was too small for the model).
OUT_OF_MEMORY = 3
#: Longest wait the operating system's timers take (a week).
MAX_SECONDS = 7 * 24 * 3600.0
#: Largest address-space limit asked for (the kernel's RLIM_INFINITY is 2^64 - 1).
MAX_BYTES = 2**62


def measure_shapes(
    model_path: Path,
    base_dir: Path | None,
    inputs: Mapping[str, tuple[Sequence[int], int]],
    names: Sequence[str],
    memory_bytes: int,
    seconds: float,
) -> dict[str, tuple[tuple[int, ...], int]]:
    """Shapes and element types of ``names`` from one run of ``model_path`` on zero ``inputs``
    (name -> shape, element type); its external weights are read from ``base_dir``.

    Raises ``MemoryError`` or ``TimeoutError`` when the run exceeds its budget and
    ``RuntimeError`` (first line of the child's error) when onnxruntime fails.
    """
    with tempfile.TemporaryDirectory() as tmp:
        names_file = Path(tmp) / "names.json"
        spec = {
            "inputs": {k: [list(s), int(e)] for k, (s, e) in inputs.items()},
            "names": list(names),
            "base_dir": None if base_dir is None else str(base_dir),
        }
        names_file.write_text(json.dumps(spec))
        script = str(Path(__file__).resolve())
        cmd = [sys.executable, "-I", script, str(model_path), str(names_file)]
        try:
            r = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=min(seconds, MAX_SECONDS),
                preexec_fn=_limit(min(memory_bytes, MAX_BYTES)),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError from None
    if r.returncode == OUT_OF_MEMORY or (r.returncode < 0 and "alloc" in r.stderr.lower()):
        raise MemoryError
    if r.returncode != 0:
        lines = [ln.strip() for ln in r.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(lines[-1][:300] if lines else f"exit status {r.returncode}")
    raw = json.loads(r.stdout)
    return {k: (tuple(int(d) for d in shape), int(elem)) for k, (shape, elem) in raw.items()}


def _limit(memory_bytes: int):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            limit = min(memory_bytes, hard if hard != resource.RLIM_INFINITY else memory_bytes)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        except (ImportError, ValueError, OSError, OverflowError):  # no such limit here
            pass

    return apply


def _child(model_path: str, names_file: str) -> int:
    """Run the model once on zero inputs; print the named tensors' shapes as JSON."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    spec = json.loads(Path(names_file).read_text())
    names = set(spec["names"])
    try:
        model = onnx.load(model_path, load_external_data=False)
        if spec["base_dir"] is not None:
            onnx.load_external_data_for_model(model, spec["base_dir"])
        model_path = str(Path(names_file).with_name("model.onnx"))
        onnx.save_model(
            model,
            model_path,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="weights.bin",
            size_threshold=4096,
        )
        del model
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.enable_cpu_mem_arena = False
        opts.enable_mem_pattern = False
        sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
        feeds = {
            k: np.zeros(shape, dtype=onnx.helper.tensor_dtype_to_np_dtype(elem))
            for k, (shape, elem) in spec["inputs"].items()
        }
        outs = sess.run(None, feeds)
    except MemoryError:
        return OUT_OF_MEMORY
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        text = str(exc)
        if "alloc" in text.lower() or "bad_alloc" in text:
            return OUT_OF_MEMORY
        print(text.strip().splitlines()[0] if text.strip() else type(exc).__name__, file=sys.stderr)
        return 1
    result = {}
    for meta, value in zip(sess.get_outputs(), outs, strict=True):
        if meta.name not in names:
            continue
        arr = np.asarray(value)
        elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype) if arr.dtype != object else 8
        result[meta.name] = [list(arr.shape), int(elem)]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
