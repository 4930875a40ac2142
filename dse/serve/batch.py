"""A folder of inputs served through a started deployment, each input's outputs to a file.

:func:`serve_folder` reads every image, ``.npy`` and ``.npz`` of a folder (sorted by name; not
its subfolders; other files are skipped and counted) with :func:`dse.serve.images.load_input`,
streams them through the deployment ``in_flight`` frames at a time, and writes the outputs of
``IN/NAME.EXT`` to ``OUT/NAME.npz``: one array per model output, under the output's name
(``numpy.load(...)[name]``), written whole under a temporary name and renamed, so an ``.npz``
there is complete, and one of an earlier run is replaced. An input that cannot be read is one
line on stderr and is counted; the others are still served. Two inputs that would write one
file (``a.jpg``, ``a.png``), or no input at all, is one line before anything is served.
"""

from __future__ import annotations

import sys
import time
import zipfile
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from dse.errors import DseError
from dse.files import staged, writable_dir
from dse.paths import shown
from dse.serve.images import Preprocess, is_input, load_input, takes_images

if TYPE_CHECKING:
    from dse.serve import Deployment

#: The latency percentiles a report gives.
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class BatchReport:
    """What a batch did: the inputs served and not, how long it took, each request's latency.

    ``wall_s`` runs from reading the first input to writing the last outputs; a request's
    latency from handing its inputs to the deployment to having its outputs (in order, as the
    deployment's stream gives them)."""

    inputs: Path
    out: Path
    served: int  # inputs whose outputs were written
    failed: tuple[tuple[str, str], ...]  # (file name, why) of each input that was not served
    skipped: int  # other files of the folder (not an image, .npy or .npz)
    wall_s: float
    latencies_ms: tuple[float, ...]  # per request served, in the inputs' order

    @property
    def throughput(self) -> float:
        """Frames served per second of ``wall_s``."""
        return self.served / self.wall_s if self.wall_s > 0 else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of the requests' latency, ms (linear between ranks)."""
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0

    def lines(self) -> list[str]:
        """The report as printed: frames, time and throughput; latency percentiles; the inputs
        not served and the files skipped."""
        n = self.served + len(self.failed)
        lines = [
            f"served {self.served} of {n} input{'s' * (n != 1)} in {self.wall_s:.2f} s "
            f"({self.throughput:.1f} frames/s): outputs in {shown(self.out)}"
        ]
        if self.latencies_ms:
            marks = ", ".join(f"p{q} {self.percentile(q):.1f} ms" for q in PERCENTILES)
            lines.append(f"latency per request (submitted to answered): {marks}")
        if self.failed:
            names = ", ".join(name for name, _ in self.failed)
            lines.append(f"not served ({len(self.failed)}, each named above): {names}")
        if self.skipped:
            lines.append(
                f"skipped {self.skipped} other file{'s' * (self.skipped != 1)} of "
                f"{shown(self.inputs)} (not an image, .npy or .npz)"
            )
        return lines


def batch_inputs(inputs: Path, out: Path) -> tuple[list[Path], int]:
    """The input files of the folder ``inputs`` (sorted by name) and the number of its other
    files, once ``out`` is made and writable; one line if ``inputs`` is not a folder, holds no
    input, or two inputs share a name, or ``out`` is ``inputs`` or cannot be written."""
    inputs, out = Path(inputs), Path(out)
    if not inputs.is_dir():
        what = "does not exist" if not inputs.exists() else "is not a folder"
        raise DseError(f"inputs={shown(inputs)} {what}: give a folder of images, .npy or .npz")
    try:
        files = sorted(p for p in inputs.iterdir() if p.is_file())
    except OSError as exc:
        raise DseError(f"cannot list inputs={shown(inputs)} ({exc.strerror or exc})") from None
    found = [p for p in files if is_input(p)]
    if not found:
        raise DseError(
            f"inputs={shown(inputs)} holds no image, .npy or .npz ({len(files)} other "
            f"file{'s' * (len(files) != 1)})"
        )
    by_stem: dict[str, Path] = {}
    for p in found:
        if p.stem in by_stem:
            raise DseError(
                f"inputs {by_stem[p.stem].name} and {p.name} would both write {p.stem}.npz: "
                "rename one"
            )
        by_stem[p.stem] = p
    if out.resolve() == inputs.resolve():
        raise DseError(
            f"out={shown(out)} is the inputs folder: its .npz outputs would be read as inputs "
            "next time: choose another out="
        )
    writable_dir(out, "out")
    return found, len(files) - len(found)


def save_outputs(path: Path, outputs: dict[str, np.ndarray]) -> None:
    """``outputs`` as an ``.npz`` at ``path`` (written under a temporary name, then renamed),
    each array under its name as given: a name with ``/`` or one of ``numpy.savez``'s own
    parameters (``file``, ``allow_pickle``) as well."""
    from numpy.lib import format as npy

    with staged(path) as tmp, zipfile.ZipFile(tmp, "w") as zf:
        for name, array in outputs.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                npy.write_array(fh, np.asanyarray(array), allow_pickle=False)


def serve_folder(
    deployment: Deployment,
    inputs: Path,
    out: Path,
    preprocess: Preprocess | None = None,
    in_flight: int = 4,
) -> BatchReport:
    """Serve every input file of the folder ``inputs`` through the started ``deployment``,
    ``in_flight`` at a time, and write each one's outputs to ``out`` (the module's docstring).
    Stopped (Ctrl-C) or failed (a rank gone: :class:`~dse.serve.ServeError`), the outputs
    written so far stay, and a line on stderr says how many before the exception goes on."""
    inputs, out = Path(inputs), Path(out)
    preprocess = preprocess or Preprocess()
    files, skipped = batch_inputs(inputs, out)
    if any(p.suffix.lower() not in (".npy", ".npz") for p in files):
        takes_images(deployment.inputs, preprocess)  # once, not per image
    failed: list[tuple[str, str]] = []
    handed: deque[tuple[Path, float]] = deque()  # each request in flight: its file, when
    latencies: list[float] = []
    bar = tqdm(total=len(files), desc="serve", unit="frame", disable=None)

    def requests() -> Iterator[dict[str, np.ndarray]]:
        for path in files:
            try:
                request = load_input(path, deployment.inputs, preprocess)
            except DseError as exc:
                failed.append((path.name, str(exc)))
                tqdm.write(f"error: not served: {exc}", file=sys.stderr)
                bar.update(1)
                continue
            handed.append((path, time.perf_counter()))
            yield request

    started = time.perf_counter()
    try:
        with bar:
            for outputs in deployment.stream(requests(), in_flight=in_flight):
                path, at = handed.popleft()
                latency = (time.perf_counter() - at) * 1e3
                save_outputs(out / f"{path.stem}.npz", _ordered(outputs, deployment))
                latencies.append(latency)  # one per file written
                bar.update(1)
    except (KeyboardInterrupt, DseError):  # stopped, or the deployment failed
        print(
            f"stopped: the outputs of {len(latencies)} of {len(files)} inputs are in {shown(out)}",
            file=sys.stderr,
        )
        raise
    return BatchReport(
        inputs,
        out,
        len(latencies),
        tuple(failed),
        skipped,
        time.perf_counter() - started,
        tuple(latencies),
    )


def _ordered(outputs: dict[str, np.ndarray], deployment: Deployment) -> dict[str, np.ndarray]:
    """``outputs`` in the model's order of its outputs (any others after)."""
    names: Sequence[str] = [p.name for p in deployment.outputs]
    first = {n: outputs[n] for n in names if n in outputs}
    return {**first, **{n: a for n, a in outputs.items() if n not in first}}
