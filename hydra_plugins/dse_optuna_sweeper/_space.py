"""Hydra's sweep syntax as Optuna distributions, and a trial's parameters back as overrides.

``choice(a,b)`` and ``a,b`` -> categorical; ``range(2,7)`` -> integers 2..6 (ordered, so a
sampler can use the order; float steps -> a stepped float); ``interval(5,40)`` -> a float in
[5, 40]; ``tag(log, interval(...))`` -> log scale; ``tag(int, interval(...))`` -> integers.
Overrides that sweep nothing are passed to every trial as given. A study keeps the space it
was made for (:func:`same_space`): another space under its name is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override, RangeSweep
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
    json_to_distribution,
)

from dse.errors import DseError
from hydra_plugins.dse_optuna_sweeper._storage import retry

#: Types Optuna stores as categorical choices as they are.
PLAIN = (str, int, float, bool)


@dataclass(frozen=True)
class Param:
    """One swept key: its Optuna distribution and how a value goes back on the command line."""

    key: str  # as given, with its prefix (+key, ++key)
    name: str  # the Optuna parameter name: the key without prefix
    distribution: BaseDistribution
    encoded: tuple[str, ...] = ()  # categorical: the override text of each choice

    def override(self, value: Any) -> str:
        if isinstance(self.distribution, CategoricalDistribution):
            text = self.encoded[int(self.distribution.to_internal_repr(value))]
        elif isinstance(value, float):
            text = repr(value)
        else:
            text = str(value)
        return f"{self.key}={text}"


@dataclass
class SearchSpace:
    params: dict[str, Param] = field(default_factory=dict)
    fixed: list[str] = field(default_factory=list)  # overrides every trial gets
    # swept keys that apply only when another swept key has one of some choices (their text)
    when: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return {name: p.distribution for name, p in self.params.items()}

    def overrides(self, values: dict[str, Any]) -> list[str]:
        """A trial's command line: the fixed overrides, then one per swept key it has."""
        return [
            *self.fixed,
            *(p.override(values[n]) for n, p in self.params.items() if n in values),
        ]

    def order(self) -> list[str]:
        """The swept keys, each conditional one after the key it depends on."""
        out: list[str] = []
        pending = list(self.params)
        while pending:
            ready = [n for n in pending if n not in self.when or self.when[n][0] in out]
            if not ready:
                raise DseError(
                    f"hydra.sweeper.conditions: {', '.join(pending)} depend on each other: "
                    "make one of them unconditional"
                )
            out += ready
            pending = [n for n in pending if n not in ready]
        return out

    def applies(self, name: str, values: dict[str, Any]) -> bool:
        """Whether the key ``name`` means something given the values sampled so far."""
        if name not in self.when:
            return True
        parent, allowed = self.when[name]
        if parent not in values:
            return False
        p = self.params[parent]
        text = p.encoded[int(p.distribution.to_internal_repr(values[parent]))]
        return text in allowed


def conditional(space: SearchSpace, conditions: dict[str, str]) -> None:
    """Record in ``space`` which swept keys apply only to some choices of another swept key
    (``{key: "other=a,b"}``; an empty condition lifts a default one); a condition on a key not
    swept, or on one not swept, is moot, and so are its choices the command does not sweep."""
    for key, text in conditions.items():
        if text is None or not str(text).strip():
            continue  # a default condition lifted: the key applies to every choice
        parent, sep, values = (part.strip() for part in str(text).partition("="))
        parent = parent.lstrip("+~")
        allowed = frozenset(v.strip() for v in values.split(",") if v.strip())
        if not sep or not parent or not allowed:
            raise DseError(
                f"hydra.sweeper.conditions.{key}={text}: write it as OTHER_KEY=choice,choice"
            )
        if key not in space.params or parent not in space.params:
            continue
        choices = space.params[parent].encoded
        if not isinstance(space.params[parent].distribution, CategoricalDistribution):
            raise DseError(
                f"hydra.sweeper.conditions.{key}={text}: {parent} is not swept as a choice"
            )
        if not allowed & set(choices):
            raise DseError(
                f"hydra.sweeper.conditions.{key}={text}: {key} applies to none of {parent}'s "
                f"choices ({','.join(choices)}): sweep {parent} over one of "
                f"{','.join(sorted(allowed))}, or do not sweep {key}"
            )
        space.when[key] = (parent, allowed)
    space.order()  # a cycle is refused now, before a study is opened


def _bad(override: Override, why: str) -> DseError:
    return DseError(f"cannot sweep '{override.input_line}': {why}")


def distribution(override: Override) -> tuple[BaseDistribution, tuple[str, ...]]:
    """The Optuna distribution of a sweep override (and the override text of categorical
    choices)."""
    value = override.value()
    tags = set(getattr(value, "tags", ()) or ())
    if isinstance(value, IntervalSweep):
        unknown = tags - {"log", "int"}
        if unknown:
            raise _bad(override, f"unknown tag {sorted(unknown)[0]} (interval takes log and int)")
        log = "log" in tags
        assert value.start is not None and value.end is not None  # the grammar asks for both
        low, high = float(value.start), float(value.end)
        if not low < high:
            raise _bad(override, "an interval needs its start below its end")
        if log and low <= 0:
            raise _bad(override, "a log interval needs a start above zero")
        if "int" in tags:
            ilow, ihigh = math.ceil(low), math.floor(high)
            if ilow > ihigh:
                raise _bad(override, "no whole number lies in this interval")
            return IntDistribution(ilow, ihigh, log=log), ()
        return FloatDistribution(low, high, log=log), ()
    if tags:
        raise _bad(override, "tags (log, int) apply to interval() only")
    if isinstance(value, RangeSweep):
        if not value.step:
            raise _bad(override, "a range needs a step other than 0")
        values = list(override.sweep_iterator())
        if not values:
            raise _bad(override, "the range is empty")
        step = abs(value.step)
        ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == len(values):
            return IntDistribution(min(ints), max(ints), step=int(step)), ()
        numbers = [float(v) for v in values if isinstance(v, int | float)]  # all, in a range
        return FloatDistribution(min(numbers), max(numbers), step=float(step)), ()
    if override.is_choice_sweep():
        raw = list(override.sweep_iterator())
        text = tuple(override.sweep_string_iterator())
        if len(set(text)) != len(text):
            raise _bad(override, "a choice lists a value twice")
        choices = tuple(v if isinstance(v, PLAIN) else t for v, t in zip(raw, text, strict=True))
        return CategoricalDistribution(choices), text
    raise _bad(override, "only choice, range and interval sweeps are supported")


def parse(arguments: Sequence[str], params: dict[str, str] | None = None) -> SearchSpace:
    """The search space of a command line (``params`` first: the command line wins)."""
    lines = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    try:
        overrides = OverridesParser.create().parse_overrides(lines)
    except Exception as exc:  # noqa: BLE001 - Hydra's parser errors are many classes
        raise DseError(f"cannot read the sweep: {str(exc).splitlines()[0]}") from None
    space = SearchSpace()
    fixed: dict[str, str] = {}
    for o in overrides:
        key = o.get_key_element()
        name = key.lstrip("+~")
        space.params.pop(name, None)
        fixed.pop(name, None)
        if o.is_sweep_override():
            dist, encoded = distribution(o)
            space.params[name] = Param(key, name, dist, encoded)
        else:
            assert o.input_line is not None  # parse_overrides keeps each override's text
            fixed[name] = o.input_line
    space.fixed = list(fixed.values())
    return space


#: The study's user attribute holding the search space it was made for.
SPACE = "search_space"


def same_space(study: optuna.Study, name: str, url: str, space: SearchSpace) -> None:
    """Refuse in one line a study that was made for another search space (its trials would
    be mixed with this command's, or Optuna would fail on a parameter of another kind); a
    new study records its space. A study without the record (made by hand, or before dse
    kept it) is judged by the parameters its trials were sampled from."""
    here = {n: distribution_to_json(d) for n, d in space.distributions.items()}
    stored = study.user_attrs.get(SPACE)
    if stored is None:
        seen: dict[str, str] = {}
        for t in retry(lambda: study.get_trials(deepcopy=False)):
            for n, d in t.distributions.items():
                seen.setdefault(n, distribution_to_json(d))
        if not seen:
            retry(lambda: study.set_user_attr(SPACE, here))
            return
        stored = seen
    if stored == here:
        return
    diff = []
    for n in sorted(set(stored) | set(here)):
        if n not in here:
            diff.append(f"{n}={describe(stored[n])} in the study, not in this command")
        elif n not in stored:
            diff.append(f"{n}={describe(here[n])} in this command, not in the study")
        elif stored[n] != here[n]:
            diff.append(f"{n}: {describe(stored[n])} in the study, {describe(here[n])} here")
    raise DseError(
        f"study '{name}' in {url} was made for another search space ({'; '.join(diff[:3])}): "
        "give a new hydra.sweeper.study_name, or sweep the study's own space"
    )


def describe(dist_json: str) -> str:
    """A distribution as the sweep syntax that makes it (``choice(a,b)``, ``range(2,7)``,
    ``interval(5,40)``, with ``tag(log, ...)``, ``tag(int, ...)``)."""
    try:
        d = json_to_distribution(dist_json)
    except Exception:  # noqa: BLE001 - a record edited by hand: show it as it is
        return dist_json
    if isinstance(d, CategoricalDistribution):
        return f"choice({','.join(map(str, d.choices))})"
    if not isinstance(d, IntDistribution | FloatDistribution):
        return dist_json  # no other kind is made by the sweep syntax
    if d.step is not None and not d.log:
        return f"range({d.low:g},{d.high + d.step:g},{d.step:g})"
    text = f"interval({d.low:g},{d.high:g})"
    tags = [t for t, on in (("log", d.log), ("int", isinstance(d, IntDistribution))) if on]
    return f"tag({', '.join(tags)}, {text})" if tags else text
