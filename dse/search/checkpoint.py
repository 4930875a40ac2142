"""Checkpoints as plain data: one ``.npz`` of arrays and JSON, loaded without pickle.

A checkpoint holds the population (genes, objectives, constraint, rank, crowding), the random
generator's state, the generation and evaluation counts, the history, the run's resolved config
and the identity of what was searched (network fingerprint, platform devices, encoding,
objectives). :func:`restore` rebuilds the search from it; nothing in the file is executed.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from dse.config import AlgorithmConfig
from dse.errors import DseError
from dse.files import write_bytes
from dse.search.hypervolume import Reference
from dse.search.problem import MappingProblem
from dse.search.state import Population, SearchState

CHECKPOINT = "checkpoint.npz"
FORMAT = 2  # 2: mapping keys by dse.mapping.keys (1: blake2b of key bytes)
_ARRAYS = ("X", "F", "G", "rank", "crowding")


def identity(problem: MappingProblem, net_fingerprint: str, platform_keys: list[str]) -> dict:
    """What a checkpoint must match to be resumed."""
    chrom = problem.chromosome
    return {
        "net": chrom.graph.name,
        "layers": len(chrom.graph),
        "fingerprint": net_fingerprint,
        "devices": list(platform_keys),
        "chromosome": type(chrom).__name__,
        "genes": int(chrom.n_genes),
        "objectives": list(problem.objectives),
    }


def save(state: SearchState, directory: Path, ident: dict, config: dict) -> Path:
    pop = state.pop
    assert pop is not None
    meta = {
        "format": FORMAT,
        "identity": ident,
        "config": config,
        "seed": state.seed,
        "generation": state.generation,
        "evaluations": state.evaluations,
        "seconds": state.seconds,
        "exhausted": state.exhausted,
        "history": state.history,
        "rng": state.rng.bit_generator.state,
        "reference": state.reference.to_dict(),
    }
    buf = io.BytesIO()
    arrays = {name: getattr(pop, name) for name in _ARRAYS}
    meta_bytes = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    # sorted as numbers by numpy (the file does not depend on the set's order), not by sorted()
    seen = np.sort(np.fromiter(state.seen, dtype=np.uint64, count=len(state.seen)))
    np.savez(buf, meta=meta_bytes, seen=seen, **arrays)
    path = Path(directory) / CHECKPOINT
    write_bytes(path, buf.getvalue())
    return path


#: Slack of a checkpoint's members over its file's size: np.savez stores them uncompressed, so
#: a real checkpoint's arrays add up to its size; a member that inflates far beyond is hostile.
_INFLATION, _SLACK = 2, 1 << 20
#: The .npy header readers by format version (np.savez writes 1.0; 2.0 for huge headers).
_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _read_members(path: Path, bad: str) -> dict[str, np.ndarray]:
    """The checkpoint's arrays, each read only after its zip entry and its .npy header say it
    holds what its shape declares, with every entry within :data:`_INFLATION` x the file's size:
    a small hostile file cannot make a resume allocate gigabytes."""
    limit = _INFLATION * path.stat().st_size + _SLACK
    out = {}
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        names = {i.filename for i in infos}
        if len(names) != len(infos) or not names <= {
            f"{k}.npy" for k in ("meta", "seen", *_ARRAYS)
        }:
            raise DseError(f"{bad}: it holds entries a checkpoint does not have")
        if sum(i.file_size for i in infos) > limit:
            raise DseError(f"{bad}: its arrays would take far more memory than its size")
        for info in infos:
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version not in _HEADERS:
                    raise DseError(f"{bad}: array '{info.filename}' has an unknown format")
                shape, _, dtype = _HEADERS[version](f)
                if dtype.hasobject or math.prod(shape) * dtype.itemsize > info.file_size:
                    raise DseError(f"{bad}: array '{info.filename}' declares more than it holds")
                f.seek(0)
                out[info.filename.removesuffix(".npy")] = np.lib.format.read_array(
                    f, allow_pickle=False
                )
    return out


def read(directory: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The checkpoint's metadata and arrays, checked for shape and type; never unpickled."""
    path = Path(directory) / CHECKPOINT
    if not path.is_file():
        raise DseError(f"nothing to resume in {directory}: no {CHECKPOINT} there")
    bad = f"{path} is not a readable dse checkpoint"
    try:
        data = _read_members(path, bad)
        meta = json.loads(data.pop("meta").tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError):
        raise DseError(f"{bad} (truncated or damaged): start a new run") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DseError(f"{bad} (format {meta.get('format') if isinstance(meta, dict) else '?'})")
    for key in ("identity", "config", "history", "rng", "reference"):
        if not isinstance(meta.get(key), dict | list):
            raise DseError(f"{bad}: '{key}' is missing")
    missing = [k for k in _ARRAYS if k not in data]
    n = len(data.get("X", []))
    if missing or any(data[k].shape[:1] != (n,) for k in _ARRAYS) or data["X"].ndim != 2:
        raise DseError(f"{bad}: its population arrays are inconsistent")
    if "seen" not in data or data["seen"].dtype != np.uint64 or data["seen"].ndim != 1:
        raise DseError(f"{bad}: its record of evaluated mappings is missing")
    for k in _ARRAYS:
        if data[k].dtype.kind not in "iuf":
            raise DseError(f"{bad}: array '{k}' is not numeric")
    return meta, data


def _history(rows: list) -> list[dict]:
    """The checkpoint's history, its rows given the columns a search records now: a checkpoint
    of an earlier dse lacks ``new_offspring`` (the generation's evaluations: each is a new
    mapping) and ``refilled`` (not known then: left empty)."""
    out, before = [], 0
    for row in rows:
        row = dict(row)
        if "new_offspring" not in row and isinstance(row.get("evaluations"), int):
            row["new_offspring"] = row["evaluations"] - before
        row.setdefault("refilled", None)
        before = row.get("evaluations", before)
        out.append(row)
    return out


def restore(
    meta: dict[str, Any],
    data: dict[str, np.ndarray],
    problem: MappingProblem,
    settings: AlgorithmConfig,
    ident: dict,
) -> SearchState:
    """The search a checkpoint describes, on ``problem`` (which must have its identity)."""
    stored = meta["identity"]
    diff = [k for k in ident if stored.get(k) != ident[k]]
    if diff:
        k = diff[0]
        raise DseError(
            f"the checkpoint was made for another {k} ({stored.get(k)!r}, now {ident[k]!r}): "
            "resume with the run's own network, platform, chromosome and objectives"
        )
    X = data["X"].astype(np.int64)
    if X.shape[1] != problem.n_var or (problem.xl > X).any() or (problem.xu < X).any():
        raise DseError("the checkpoint's genes do not fit this encoding: start a new run")
    F = data["F"].astype(np.float64)
    if F.ndim != 2 or F.shape[1] != problem.n_obj or data["G"].ndim != 2:
        raise DseError("the checkpoint's objectives do not fit this run: start a new run")
    rng = np.random.default_rng()
    try:
        rng.bit_generator.state = meta["rng"]
    except (TypeError, ValueError, KeyError):
        raise DseError("the checkpoint's random state is damaged: start a new run") from None
    ref = meta["reference"]
    state = SearchState(
        problem,
        settings,
        int(meta["seed"]),
        rng,
        Reference(np.asarray(ref["ideal"], float), np.asarray(ref["nadir"], float)),
        Population(
            X,
            F,
            data["G"].astype(np.float64),
            data["rank"].astype(np.int64),
            data["crowding"].astype(np.float64),
            problem.chromosome.decode(X).keys().tolist(),
        ),
        generation=int(meta["generation"]),
        evaluations=int(meta["evaluations"]),
        history=_history(meta["history"]),
        seconds=float(meta["seconds"]),
        seen=set(data["seen"].tolist()),
        exhausted=bool(meta.get("exhausted", False)),
    )
    return state
