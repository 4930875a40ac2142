"""Seeded weights for zoo networks, written once to an on-disk cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx

from dse.errors import DseError
from dse.files import why_unwritable
from dse.net.onnx_load import append_external
from dse.net.zoo.builder import Fill
from dse.net.zoo.registry import construct, network

CACHE_ENV = "DSE_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir`, else $DSE_CACHE, else ~/.cache/dse/zoo."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "dse" / "zoo"


def fill_weights(
    model: onnx.ModelProto, fills: dict[str, Fill], seed: int, data: BinaryIO | None = None
) -> None:
    """Give every hollow initializer float32 data, in graph order: He-normal or a constant;
    into ``data`` (an open file: the tensors' external data, each at a 4 KiB boundary) when
    given, so no more than one tensor is ever held in memory, else into the model."""
    rng = np.random.default_rng(seed)
    for init in model.graph.initializer:
        fill = fills[init.name]
        dims = tuple(init.dims)
        if fill.kind == "he":
            arr = rng.standard_normal(dims, dtype=np.float32)
            arr *= np.float32(np.sqrt(2.0 / fill.value))
        elif fill.kind == "scales":  # a Resize's scales: 1 for batch and channels
            arr = np.array([1.0, 1.0, fill.value, fill.value], dtype=np.float32)
        else:
            arr = np.full(dims, fill.value, dtype=np.float32)
        if data is None or fill.kind == "scales":  # a shape-like input: onnxruntime reads it
            init.raw_data = arr.tobytes()  # when it loads the model, so it stays inline
            continue
        append_external(data, init, arr)


def materialize(
    name: str, seed: int = 0, cache_dir: str | Path | None = None, external: bool = False
) -> Path:
    """Path of a runnable ONNX file for `name` with seeded weights; built only if not cached.
    With ``external``, the weights are in a data file beside it (``NAME-seedN-external.data``):
    onnxruntime then loads them without holding a second copy in memory, which lets a device
    with little memory run a network whole (AlexNet on 512 MB)."""
    network(name)  # unknown names fail before the cache is consulted
    root = cache_root(cache_dir)
    stem = f"{name}-seed{seed}" + ("-external" if external else "")
    path = root / f"{stem}.onnx"
    if path.exists():
        return path
    why = why_unwritable(root)
    if why is not None:
        raise DseError(_unwritable(root, cache_dir, why))
    model, fills = construct(name)
    try:
        _write(root, path, stem, model, fills, seed, external)
    except OSError as exc:  # a disk that fills up, a folder taken away: nothing half-written
        raise DseError(_unwritable(root, cache_dir, exc.strerror or str(exc))) from None
    return path


def _unwritable(root: Path, cache_dir: str | Path | None, why: str) -> str:
    """The line for a cache folder the weights cannot be written to, naming the setting."""
    named = os.environ.get(CACHE_ENV) and cache_dir is None
    where = f"{CACHE_ENV}={root}" if named else f"the zoo's cache {root}"
    return (
        f"cannot write the zoo's weights to {where} ({why}): "
        f"set {CACHE_ENV} to a folder you can write"
    )


def _write(
    root: Path,
    path: Path,
    stem: str,
    model: onnx.ModelProto,
    fills: dict[str, Fill],
    seed: int,
    external: bool,
) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if not external:
        fill_weights(model, fills, seed)
        _write_atomically(path, model.SerializeToString())
        return
    with tempfile.TemporaryDirectory(prefix=f".{stem}.", dir=root) as tmp:
        # both files under their final names in a private directory, then moved: the model
        # names its data file, and a reader never meets half of either
        data = Path(tmp) / f"{stem}.data"
        with open(data, "wb") as f:
            fill_weights(model, fills, seed, f)
        (Path(tmp) / path.name).write_bytes(model.SerializeToString())
        for p in (data, Path(tmp) / path.name):  # the model last: it is what marks the cache
            os.chmod(p, 0o644)
            os.replace(p, root / p.name)


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file in its directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
