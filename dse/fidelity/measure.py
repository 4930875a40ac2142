"""Measuring a fidelity run's mappings (:mod:`dse.measuring.measure`: deployed into
``<out>/deployments/<label>``, run in interleaved rounds, brought to the machine's speed at
calibration, the model's prediction beside each), and the runtime's own memory against
calibration's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dse.fidelity.settings import FidelitySettings
from dse.mapping import Mappings
from dse.measuring.measure import Measured, Settings, measure_mappings
from dse.measuring.rounds import Rounds
from dse.measuring.speed import note
from dse.net import Net
from dse.runtime.launch.mpiexec import Launcher
from models_analytical.coefficients import MemoryReference
from models_analytical.model import AnalyticalModel

#: Where a fidelity run deploys its mappings, under its output directory.
DEPLOYMENTS = "deployments"
#: A rank's start RSS this far (relative) from calibration's is reported as a changed baseline.
BASELINE_CHANGED = 0.05


@dataclass(frozen=True)
class MemoryBaseline:
    """The RSS the runs' ranks started at before loading (median), beside calibration's (None
    without one), and whether it moved by more than :data:`BASELINE_CHANGED`: a memory
    prediction carries that difference in full."""

    start_mb: float
    reference_mb: float | None
    changed: bool


def memory_baseline(model: AnalyticalModel, start_mb: float | None) -> MemoryBaseline | None:
    """:class:`MemoryBaseline` of runs whose ranks started at ``start_mb`` (None: unknown),
    against the coefficients' ``memory_reference`` note."""
    if start_mb is None:
        return None
    ref = note(model, "memory_reference", MemoryReference)
    then = None if ref is None else ref.start_mb
    changed = then is not None and abs(start_mb - then) > BASELINE_CHANGED * then
    return MemoryBaseline(start_mb, then, changed)


def measure(
    out: Path,
    net: Net,
    model: AnalyticalModel,
    mappings: Mappings,
    labels: list[str],
    s: FidelitySettings,
    tick: Callable[[], None],
    launcher: Launcher | None = None,
) -> Measured:
    """Every mapping deployed into ``out/deployments/<label>`` and measured in ``s.rounds``
    interleaved rounds (one more for each whose rounds disagree), with the speed probe where
    ``s.probe``, the pipelined period where ``s.stream``; sub-models deleted at the end
    unless ``s.keep``. ``tick`` after each deployment and each run; ``launcher``: how the
    ranks start (default: on the platform's hosts by name)."""
    rounds = Rounds(s.rounds, s.warmup, s.iterations, s.timeout_s)
    settings = Settings(rounds, s.stream, s.probe, s.seed, s.keep)
    directories = [out / DEPLOYMENTS / label for label in labels]
    return measure_mappings(net, model, mappings, labels, directories, settings, tick, launcher)
