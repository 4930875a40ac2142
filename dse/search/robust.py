"""Plans that hold under several conditions: the platform's profiles (``profiles:``,
:class:`dse.platform.Profile`) and the search's ``robust`` rule, the one home of that rule.

A mapping's figures are computed under each profile, the nominal first, by the model under the
profile's conditions (:meth:`models_analytical.model.AnalyticalModel.under`). Under
``robust=worst`` each objective is the largest of its values over the profiles, under
``robust=mean`` their mean, under ``robust=none`` the nominal's (the profiles are then only
shown in the outputs). The memory constraint is the nominal's: no condition changes memory.

Only what a profile changes is computed again. A mapping is the nominal's under a profile
that changes the speed of no device that works in it (every cost a device's speed scales is
part of its busy time) and, where it uses one board only, whatever the profile does to the
network (no transfer of it crosses a board); the others are scheduled under the profile, in
one batch. A profile whose model has the same inputs as an earlier one's (``edge1`` at 50
Mbit/s and the whole network at 50 Mbit/s, when edge1 is one of two boards) takes its figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dse import objectives
from dse.config import ROBUST
from dse.mapping import Mappings
from models_analytical.conditions import Conditions, profile_conditions
from models_analytical.model import AnalyticalModel, Evaluation

#: The ``robust`` setting: how one objective is made of its values under the profiles.
RULES = ROBUST


def combine(rule: str, per_profile: np.ndarray) -> np.ndarray:
    """[P, k] objectives of ``per_profile`` [S, P, k] (the nominal first) by ``rule``: the
    largest over the profiles (worst), their mean, or the nominal's (none)."""
    if rule == "worst":
        return per_profile.max(axis=0)
    if rule == "mean":
        return per_profile.mean(axis=0)
    return per_profile[0]


class Profiles:
    """The model under each of the platform's profiles (the nominal first: the model itself)
    and the rule that makes one objective of their values."""

    def __init__(
        self,
        model: AnalyticalModel,
        rule: str = "none",
        conditions: Sequence[Conditions] | None = None,
    ) -> None:
        """``conditions``: the nominal's first (None: the platform's profiles,
        :func:`~models_analytical.conditions.profile_conditions`)."""
        if rule not in RULES:
            raise ValueError(f"robust rule {rule!r} is not one of {RULES}")
        self.rule = rule
        self.conditions = list(conditions or profile_conditions(model.platform))
        self.models = [model, *(model.under(c) for c in self.conditions[1:])]
        #: each profile's first profile of the same model inputs (itself, or an earlier one)
        self.same = [
            next(k for k in range(s + 1) if same_inputs(self.models[k], self.models[s]))
            for s in range(len(self.models))
        ]
        hosts = [d.host for d in model.platform.devices]
        self._board = np.unique(hosts, return_inverse=True)[1]
        self._touch = [self._touched(c) for c in self.conditions]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.conditions]

    def _touched(self, c: Conditions) -> tuple[np.ndarray, bool]:
        """The devices whose work ``c`` slows or speeds, and whether it changes any link
        between boards."""
        platform = self.models[0].platform
        slowed = c.device_speed(platform) != 1.0
        links = c.network != 1.0 or any(f != 1.0 for f in c.ports.values())
        return slowed, links

    def changed(self, index: int, ev: Evaluation) -> np.ndarray:
        """bool [P]: the mappings (by their nominal figures ``ev``) whose figures profile
        ``index`` may change: it changes the speed of a device that works in them (busy), or a
        link between boards and they use more than one board."""
        slowed, links = self._touch[index]
        used = ev.used
        out = ((ev.busy_s > 0) & slowed).any(axis=1)
        if links:
            boards = np.where(used, self._board, -1)
            lo = np.where(used, self._board, np.iinfo(np.int64).max).min(axis=1)
            out |= boards.max(axis=1) > lo
        return out

    def evaluate(
        self, names: Sequence[str], mappings: Mappings, every: bool = False
    ) -> tuple[np.ndarray, Evaluation]:
        """[S, P, k] the objectives ``names`` (display units) of each mapping under each
        profile, and the nominal :class:`Evaluation`. Under ``robust=none`` only the nominal
        is computed (the other rows repeat it) unless ``every``."""
        ev = self.models[0].evaluate(mappings)
        nominal = objectives.values(names, ev)
        out = np.repeat(nominal[None], len(self.models), axis=0)
        if self.rule == "none" and not every:
            return out, ev
        for s in range(1, len(self.models)):
            if self.same[s] != s:
                out[s] = out[self.same[s]]
                continue
            which = np.flatnonzero(self.changed(s, ev))
            if len(which) == len(mappings):
                out[s] = objectives.values(names, self.models[s].evaluate(mappings))
            elif len(which):
                under = self.models[s].evaluate(mappings.take(which))
                out[s, which] = objectives.values(names, under)
        return out, ev

    def objectives(self, names: Sequence[str], mappings: Mappings) -> tuple[np.ndarray, Evaluation]:
        """[P, k] the objectives ``names`` of each mapping by the rule, and the nominal
        :class:`Evaluation` (its memory is every profile's)."""
        per_profile, ev = self.evaluate(names, mappings)
        return combine(self.rule, per_profile), ev


def same_inputs(a: AnalyticalModel, b: AnalyticalModel) -> bool:
    """Whether two models of one graph and platform have the same kernel inputs (the same
    figures for every mapping)."""
    for x, y in zip(a.inputs, b.inputs, strict=True):
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            if not (x.shape == y.shape and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True
