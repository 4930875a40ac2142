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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import numpy as np

from dse import records
from dse.config import AlgorithmConfig
from dse.errors import DseError
from dse.files import write_bytes
from dse.records import Range, Undefined
from dse.search.hypervolume import Reference
from dse.search.problem import MappingProblem
from dse.search.state import Population, SearchState

CHECKPOINT = "checkpoint.npz"
FORMAT = 2  # 2: mapping keys by dse.mapping.keys (1: blake2b of key bytes)
_ARRAYS = ("X", "F", "G", "rank", "crowding")
FIX = "start a new run"

Count = Annotated[int, Range(0)]
#: The best value of an objective among the feasible mappings; NaN when none is feasible.
Best = Annotated[float, Range(0), Undefined()]


class _Columns(TypedDict):
    generation: Annotated[int, Range(1)]
    evaluations: Count
    feasible: Count
    hypervolume: Annotated[float, Range(0)]


class Row(_Columns, total=False):
    """A generation's row of the history (:func:`dse.search.nsga2.record`): a ``best_`` column
    of each objective searched (every objective of :data:`dse.objectives.OBJECTIVES` is
    declared here); an earlier dse's rows lack ``new_offspring`` and ``refilled``."""

    new_offspring: Count
    refilled: Count | None
    best_latency: Best
    best_memory: Best
    best_energy: Best
    best_total_energy: Best
    best_bytes: Best
    best_period: Best


@dataclass(frozen=True)
class ReferenceMeta:
    """The hypervolume's normalisation (:class:`~dse.search.hypervolume.Reference`)."""

    ideal: list[Annotated[float, Range(0)]]
    nadir: list[Annotated[float, Range(0)]]


@dataclass(frozen=True)
class Meta:
    """A checkpoint's metadata: everything but its arrays."""

    format: int
    identity: dict[str, Any]  # compared with the run's (:func:`identity`)
    config: dict[str, Any]  # the run's resolved config, read by dse.app.resumed_config
    seed: Annotated[int, Range(0, 2**32 - 1)]
    generation: Annotated[int, Range(1)]  # the first population is generation 1
    evaluations: Count
    seconds: Annotated[float, Range(0)]
    history: list[Row]
    rng: dict[str, Any]  # numpy's bit generator state (128-bit integers), set by numpy
    reference: ReferenceMeta
    exhausted: bool = False


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
    }  # as Meta declares it (its history's rows with their columns in record()'s order)
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


def read(directory: Path) -> tuple[Meta, dict[str, np.ndarray]]:
    """The checkpoint's metadata, every field checked by type and range, and its arrays,
    checked for shape, type and finite values; never unpickled."""
    path = Path(directory) / CHECKPOINT
    if not path.is_file():
        raise DseError(f"nothing to resume in {directory}: no {CHECKPOINT} there")
    bad = f"{path} is not a readable dse checkpoint"
    try:
        data = _read_members(path, bad)
        doc = json.loads(data.pop("meta").tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError):
        raise DseError(f"{bad} (truncated or damaged): start a new run") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DseError(f"{bad} (format {doc.get('format') if isinstance(doc, dict) else '?'})")
    meta = records.read(Meta, doc, bad, FIX)
    missing = [k for k in _ARRAYS if k not in data]
    n = len(data.get("X", []))
    if missing or any(data[k].shape[:1] != (n,) for k in _ARRAYS) or data["X"].ndim != 2:
        raise DseError(f"{bad}: its population arrays are inconsistent")
    if "seen" not in data or data["seen"].dtype != np.uint64 or data["seen"].ndim != 1:
        raise DseError(f"{bad}: its record of evaluated mappings is missing")
    for k in _ARRAYS:
        if data[k].dtype.kind not in "iuf":
            raise DseError(f"{bad}: array '{k}' is not numeric")
    # objectives and constraint finite; crowding may be infinite (a front's ends), never NaN
    for k in ("F", "G", "crowding"):
        if (np.isnan(data[k]) if k == "crowding" else ~np.isfinite(data[k])).any():
            raise DseError(f"{bad}: array '{k}' holds a value that is not a finite number ({FIX})")
    if (data["F"] < 0).any() or (data["rank"] < -1).any():
        raise DseError(f"{bad}: its population arrays hold values out of range ({FIX})")
    return meta, data


def _history(rows: list[Row], objectives: list[str]) -> list[dict]:
    """The checkpoint's history, its rows with the columns a search records now, in
    :func:`~dse.search.nsga2.record`'s order: a checkpoint of an earlier dse lacks
    ``new_offspring`` (the generation's evaluations: each is a new mapping) and ``refilled``
    (not known then: left empty)."""
    out, before = [], 0
    for i, row in enumerate(rows):
        plain: dict[str, Any] = dict(row)
        missing = [f"best_{o}" for o in objectives if f"best_{o}" not in plain]
        if missing:
            raise DseError(f"the checkpoint's history[{i}] lacks '{missing[0]}': {FIX}")
        out.append(
            {
                "generation": row["generation"],
                "evaluations": row["evaluations"],
                "feasible": row["feasible"],
                **{f"best_{o}": plain[f"best_{o}"] for o in objectives},
                "hypervolume": row["hypervolume"],
                "new_offspring": row.get("new_offspring", row["evaluations"] - before),
                "refilled": row.get("refilled"),
            }
        )
        before = row["evaluations"]
    return out


def restore(
    meta: Meta,
    data: dict[str, np.ndarray],
    problem: MappingProblem,
    settings: AlgorithmConfig,
    ident: dict,
) -> SearchState:
    """The search a checkpoint describes, on ``problem`` (which must have its identity)."""
    stored = meta.identity
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
    ref = meta.reference
    if not len(ref.ideal) == len(ref.nadir) == problem.n_obj:
        raise DseError(
            f"the checkpoint's reference holds {len(ref.ideal)} and {len(ref.nadir)} values "
            f"for {problem.n_obj} objectives: {FIX}"
        )
    rng = np.random.default_rng()
    try:
        rng.bit_generator.state = meta.rng
    except (TypeError, ValueError, KeyError, OverflowError):
        raise DseError("the checkpoint's random state is damaged: start a new run") from None
    state = SearchState(
        problem,
        settings,
        meta.seed,
        rng,
        Reference(np.asarray(ref.ideal, float), np.asarray(ref.nadir, float)),
        Population(
            X,
            F,
            data["G"].astype(np.float64),
            data["rank"].astype(np.int64),
            data["crowding"].astype(np.float64),
            problem.chromosome.decode(X).keys().tolist(),
        ),
        generation=meta.generation,
        evaluations=meta.evaluations,
        history=_history(meta.history, list(problem.objectives)),
        seconds=meta.seconds,
        seen=set(data["seen"].tolist()),
        exhausted=meta.exhausted,
    )
    return state
