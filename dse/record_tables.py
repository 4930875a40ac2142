"""A record's fields (:mod:`dse.records`) as the manual's table: key, type, unit, range, meaning."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Literal

from dse.records import REQUIRED, Doc, Items, Range, Text, fields_of, unwrap

_KINDS = {bool: "true or false", int: "integer", float: "number", str: "string", Any: "JSON"}


def reference(cls: type) -> str:
    """A record's fields as a Markdown table (key, type, unit, range, default, meaning): a row
    per field, then one per field of a record or ``TypedDict`` it holds and one for the values
    of a table (``key.<name>``, the name its key type's :class:`Doc` gives)."""
    rows = ["| key | type | unit | range | default | meaning |", "|---|---|---|---|---|---|"]
    for f in fields_of(cls):
        rows += _rows(f.key, f.tp, f.default)
    return "\n".join(rows) + "\n"


def _marker(meta: list[Any], cls: type) -> Any:
    return next((m for m in meta if isinstance(m, cls)), None)


def _shown(default: Any) -> str:
    if default is REQUIRED:
        return "required"
    if type(default) in (list, dict) and not default:
        return "empty"
    return f"`{json.dumps(default)}`"


def _rows(key_: str, tp: Any, default: Any) -> list[str]:
    tp, meta, optional = unwrap(tp)
    doc = _marker(meta, Doc) or Doc("")
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    null = " or null" if optional else ""

    def row(kind_: str, unit: str = "", span: str = "") -> str:
        cells = [f"`{key_}`", kind_, unit, span, _shown(default), doc.what]
        return "| " + " | ".join(cells) + " |"

    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
        out = [row("object" + null)]
        for f in fields_of(tp):
            out += _rows(f"{key_}.{f.key}", f.tp, f.default)
        return out
    if origin is dict:
        name = (_marker(unwrap(args[0])[1], Doc) or Doc("name")).what
        return [
            row(f"object: {name} → value" + null),
            *_rows(f"{key_}.<{name}>", args[1], REQUIRED),
        ]
    if origin in (list, tuple) and not (origin is tuple and args[-1] is not Ellipsis):
        item, item_meta, _ = unwrap(args[0])
        most = _marker(meta, Items)
        span = ", ".join(s for s in (_span(item, item_meta), most and f"at most {most.max}") if s)
        unit = doc.unit or (_marker(item_meta, Doc) or Doc("")).unit
        return [row(f"list of {_KINDS.get(item, 'value')}s" + null, unit, span)]
    if origin is tuple:
        terms = []
        for a in args:
            term, term_meta, _ = unwrap(a)
            d = _marker(term_meta, Doc) or Doc("")
            terms.append(f"{d.what} ({', '.join(filter(None, [d.unit, _span(term, term_meta)]))})")
        kinds = {_KINDS.get(unwrap(a)[0], "value") for a in args}
        kind_ = f"{kinds.pop()}s" if len(kinds) == 1 else "values"
        return [row(f"list of {len(args)} {kind_}" + null, "", ", ".join(terms))]
    if origin is Literal:
        return [row("string" + null, "", "one of " + ", ".join(map(str, args)))]
    return [row(_KINDS.get(tp, getattr(tp, "__name__", str(tp))) + null, doc.unit, _span(tp, meta))]


def _span(tp: Any, meta: list[Any]) -> str:
    """What a scalar's constraints allow, as the manual says it."""
    bounds, text = _marker(meta, Range), _marker(meta, Text)
    if bounds is not None:
        return str(bounds)
    if text is not None:
        return f"at most {text.max} characters"
    return ""
