"""The pymoo problem: gene matrix -> decode -> analytical model -> objectives and constraints."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pymoo.core.problem import Problem

from chromosomes import Chromosome
from dse.errors import DseError
from models_analytical.model import OBJECTIVES, AnalyticalModel

#: Units the objectives are reported in: the model works in seconds, MB, joules and bytes.
SCALE = {
    "latency": 1e3,
    "memory": 1.0,
    "energy": 1.0,
    "total_energy": 1.0,
    "bytes": 1.0,
    "period": 1e3,
}
UNITS = {
    "latency": "ms",
    "memory": "MB",
    "energy": "J",
    "total_energy": "J",
    "bytes": "B",
    "period": "ms",
}


def check_objectives(names: Sequence[str]) -> list[str]:
    names = list(names)
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names:
        raise DseError(
            f"unknown objective '{unknown[0] if unknown else ''}': choose from "
            f"{', '.join(OBJECTIVES)}"
        )
    return names


class MappingProblem(Problem):
    """Minimise the chosen objectives; one constraint: the fullest device within capacity."""

    def __init__(
        self, chromosome: Chromosome, model: AnalyticalModel, objectives: Sequence[str]
    ) -> None:
        self.chromosome, self.model = chromosome, model
        self.objectives = check_objectives(objectives)
        self.evaluations = 0
        super().__init__(
            n_var=chromosome.n_genes,
            n_obj=len(self.objectives),
            n_ieq_constr=1,
            xl=chromosome.lower,
            xu=chromosome.upper,
            vtype=int,
        )

    def _evaluate(self, x: np.ndarray, out: dict, *args: object, **kwargs: object) -> None:
        ev = self.model.evaluate(self.chromosome.decode(np.rint(x).astype(np.int64)))
        out["F"] = np.column_stack([ev.objective(n) * SCALE[n] for n in self.objectives])
        out["G"] = ev.constraints().max(axis=1, keepdims=True)
        self.evaluations += len(x)

    def __getstate__(self) -> dict:
        # the compiled model is rebuilt on load; checkpoints keep only what the search needs
        state = self.__dict__.copy()
        state["model"] = None
        return state
