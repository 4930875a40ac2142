"""The search problem: genes -> mappings -> analytical model -> objectives and constraint."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chromosomes import Chromosome
from dse import objectives
from dse.mapping import Mappings
from dse.search.robust import Profiles
from models_analytical.model import AnalyticalModel, Evaluation


class MappingProblem:
    """Minimise the chosen objectives (display units, :mod:`dse.objectives`); one constraint:
    the fullest device within its capacity (G <= 0).

    :mod:`dse.search.nsga2` runs its own loop on arrays, so no pymoo algorithm drives this
    problem. What pymoo's operators read of the problem they are given (``_do(problem, X)``:
    SBX, PM, uniform and two-point crossover, :class:`~dse.search.operators.RandomReset`) is
    ``n_var`` (PM's and RandomReset's default gene rate, 1/n_var) and the bounds ``xl`` and
    ``xu``, float arrays as pymoo's ``Problem`` would hold them (the rounding and clipping of
    offspring use the same arrays).

    With ``profiles`` (:mod:`dse.search.robust`), each objective is made of its values under
    the platform's profiles by their rule; ``model`` is the nominal's."""

    def __init__(
        self,
        chromosome: Chromosome,
        model: AnalyticalModel,
        names: Sequence[str],
        profiles: Profiles | None = None,
    ) -> None:
        self.chromosome, self.model, self.profiles = chromosome, model, profiles
        self.objectives = objectives.check_objectives(names)
        self.n_var: int = chromosome.n_genes
        self.n_obj: int = len(self.objectives)
        self.xl: np.ndarray = np.asarray(chromosome.lower).astype(float)
        self.xu: np.ndarray = np.asarray(chromosome.upper).astype(float)

    def evaluate(self, genes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """F [n, n_obj] (display units) and G [n, 1] of gene vectors (rounded to integers)."""
        return self.evaluate_mappings(self.chromosome.decode(np.rint(genes).astype(np.int64)))

    def evaluate_mappings(self, mappings: Mappings) -> tuple[np.ndarray, np.ndarray]:
        """F [n, n_obj] (display units) and G [n, 1] of decoded mappings: G is the fullest
        device's memory over its capacity, minus 1."""
        f, ev = self.scores(mappings)
        return f, ev.constraints().max(axis=1, keepdims=True)

    def scores(self, mappings: Mappings) -> tuple[np.ndarray, Evaluation]:
        """F [n, n_obj] (display units, by the profiles' rule where there are profiles) and
        the model's (nominal) :class:`Evaluation` of decoded mappings."""
        if self.profiles is not None:
            return self.profiles.objectives(self.objectives, mappings)
        ev = self.model.evaluate(mappings)
        return objectives.values(self.objectives, ev), ev
