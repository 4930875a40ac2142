"""Hypervolume in one normalisation per (network, platform, coefficients, objectives).

Runs, seeds, encodings and sweep trials on the same problem compare by this number. The
normalisation comes from fixed reference mappings that depend on no run: every one-device
mapping plus 256 vertical and 256 two-part naive mappings drawn with seed 0. Objectives are
scaled so those span [0, 1] (ideal = their best, nadir = their worst); the hypervolume is
measured up to 1.1 in each objective, so a front better than every reference mapping can
reach more than 1.1^k - (what it leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pymoo.indicators.hv import HV

from chromosomes import NaiveChromosome, VerticalChromosome
from dse.mapping import Mappings
from dse.search.problem import MappingProblem

REFERENCE_SAMPLES = 256
REFERENCE_POINT = 1.1


@dataclass(frozen=True)
class Reference:
    ideal: np.ndarray  # [n_obj] display units
    nadir: np.ndarray

    @classmethod
    def of(cls, problem: MappingProblem) -> Reference:
        graph, n_dev = problem.chromosome.graph, problem.chromosome.n_devices
        rng = np.random.default_rng(0)
        batches = []
        vertical = VerticalChromosome(graph, n_dev)
        genes = np.stack([vertical.single_device(d) for d in range(n_dev)])
        batches.append(vertical.decode(genes))
        batches.append(vertical.decode(vertical.sample(REFERENCE_SAMPLES, rng)))
        if graph.splittable.any():
            naive = NaiveChromosome(graph, n_dev, splits=min(2, n_dev))
            batches.append(naive.decode(naive.sample(REFERENCE_SAMPLES, rng)))
        f, _ = problem.evaluate_mappings(Mappings.concat(batches))
        return cls(f.min(axis=0), f.max(axis=0))

    def normalise(self, f: np.ndarray) -> np.ndarray:
        return (f - self.ideal) / np.maximum(self.nadir - self.ideal, 1e-12)

    def hypervolume(self, f: np.ndarray) -> float:
        """Of the points ``f`` [n, n_obj] (display units); 0 for none."""
        if len(f) == 0:
            return 0.0
        ref = np.full(f.shape[1], REFERENCE_POINT)
        return float(HV(ref_point=ref)(self.normalise(f)))

    def to_dict(self) -> dict:
        return {"ideal": self.ideal.tolist(), "nadir": self.nadir.tolist()}
