"""Seeded weights for zoo networks, written once to an on-disk cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

from dse.net.zoo.builder import Fill
from dse.net.zoo.registry import construct, network

CACHE_ENV = "DSE_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir`, else $DSE_CACHE, else ~/.cache/dse/zoo."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "dse" / "zoo"


def fill_weights(model: onnx.ModelProto, fills: dict[str, Fill], seed: int) -> None:
    """Give every hollow initializer float32 data, in graph order: He-normal or a constant."""
    rng = np.random.default_rng(seed)
    for init in model.graph.initializer:
        fill = fills[init.name]
        dims = tuple(init.dims)
        if fill.kind == "he":
            arr = rng.standard_normal(dims, dtype=np.float32)
            arr *= np.float32(np.sqrt(2.0 / fill.value))
        else:
            arr = np.full(dims, fill.value, dtype=np.float32)
        init.raw_data = arr.tobytes()


def materialize(name: str, seed: int = 0, cache_dir: str | Path | None = None) -> Path:
    """Path of a runnable ONNX file for `name` with seeded weights; built only if not cached."""
    network(name)  # unknown names fail before the cache is consulted
    root = cache_root(cache_dir)
    path = root / f"{name}-seed{seed}.onnx"
    if path.exists():
        return path
    model, fills = construct(name)
    fill_weights(model, fills, seed)
    data = model.SerializeToString()
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
