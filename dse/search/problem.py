"""The pymoo problem: gene matrix -> decode -> analytical model -> objectives and constraints."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pymoo.core.problem import Problem

from chromosomes import Chromosome
from dse import objectives
from dse.mapping import Mappings
from models_analytical.model import AnalyticalModel, Evaluation


class MappingProblem(Problem):
    """Minimise the chosen objectives (display units, :mod:`dse.objectives`); one constraint:
    the fullest device within its capacity."""

    def __init__(
        self, chromosome: Chromosome, model: AnalyticalModel, names: Sequence[str]
    ) -> None:
        self.chromosome, self.model = chromosome, model
        self.objectives = objectives.check_objectives(names)
        super().__init__(
            n_var=chromosome.n_genes,
            n_obj=len(self.objectives),
            n_ieq_constr=1,
            xl=chromosome.lower,
            xu=chromosome.upper,
            vtype=int,
        )

    def _evaluate(self, x: np.ndarray, out: dict, *args: object, **kwargs: object) -> None:
        self.evaluate_mappings(self.chromosome.decode(np.rint(x).astype(np.int64)), out)

    def evaluate_mappings(self, mappings: Mappings, out: dict) -> None:
        """F (display units) and G of decoded mappings."""
        self._fill(self.model.evaluate(mappings), out)

    def _fill(self, ev: Evaluation, out: dict) -> None:
        out["F"] = objectives.values(self.objectives, ev)
        out["G"] = ev.constraints().max(axis=1, keepdims=True)
