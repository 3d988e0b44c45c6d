"""Filters for a Qdrant Edge shard: portable filters translated, and Qdrant's JSON filter parsed whole or refused."""

from __future__ import annotations

import json
from typing import Any

import qdrant_edge as qe

from connectors.base import StoreError
from connectors.filters import ENTITY, And, Cond, Filter, Or, entity_tag

Condition = (
    qe.Filter | qe.FieldCondition | qe.HasIdCondition | qe.IsEmptyCondition | qe.IsNullCondition
    | qe.HasVectorCondition | qe.NestedCondition
)  # fmt: skip
RANGE_KEYS = ("gt", "gte", "lt", "lte")
CLAUSES = ("must", "should", "must_not")


def to_edge(f: Filter) -> qe.Filter:
    """A portable filter as Edge conditions (must / should / must_not), the same tree the server connector builds."""
    if isinstance(f, And):
        return qe.Filter(must=[to_edge(x) for x in f.items])
    if isinstance(f, Or):
        return qe.Filter(should=[to_edge(x) for x in f.items])
    return _cond(f)


def _cond(c: Cond) -> qe.Filter:
    key, values = c.field, c.values
    if c.field.startswith(ENTITY):
        key, values = "entity_tags", tuple(entity_tag(c.field, v) for v in values)
    if c.op in ("eq", "ne", "in"):
        if any(isinstance(v, float) for v in values):
            raise StoreError(f"{c.field}: Qdrant matches strings and whole numbers; use a range (>, <) here", "INVALID_FILTER")  # fmt: skip
        strings = [v for v in values if isinstance(v, str)]
        among = strings if len(strings) == len(values) else [v for v in values if isinstance(v, int)]
        if c.op == "in":
            return qe.Filter(must=[qe.FieldCondition(key=key, match=qe.MatchAny(among))])
        cond = qe.FieldCondition(key=key, match=qe.MatchValue(among[0]))
        return qe.Filter(must=[cond]) if c.op == "eq" else qe.Filter(must_not=[cond])
    rng = qe.RangeFloat(**{c.op: float(values[0])})
    return qe.Filter(must=[qe.FieldCondition(key=key, range=rng)])


def native_filter(raw: object) -> qe.Filter:
    """Qdrant's JSON filter (`{"must": [{"key": "source", "match": {"value": "a.md"}}]}`), as text or a dict.

    Clauses: must, should, must_not (nested filters allowed); conditions: `match` (value, any, except, text),
    `range` (gt, gte, lt, lte), `has_id`, `is_empty`, `is_null`. Anything else is refused, never dropped.
    """
    try:
        doc = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise _bad(f"not JSON: {e.msg} at column {e.colno}") from None
    return _filter(doc, "filter")


def _bad(why: str) -> StoreError:
    return StoreError(f"not a Qdrant filter: {why}", code="INVALID_FILTER")


def _filter(doc: object, where: str) -> qe.Filter:
    if not isinstance(doc, dict) or not doc:
        raise _bad(f"{where} must be an object with must / should / must_not")
    unknown = set(doc) - set(CLAUSES)
    if unknown:
        raise _bad(f"{where} has unknown keys {sorted(unknown)}; allowed: {', '.join(CLAUSES)}")
    parts: dict[str, list[Condition] | None] = {}
    for clause in CLAUSES:
        items = doc.get(clause)
        if items is not None:
            items = items if isinstance(items, list) else [items]
            parts[clause] = [_condition(x, f"{where}.{clause}[{i}]") for i, x in enumerate(items)]
    return qe.Filter(must=parts.get("must"), should=parts.get("should"), must_not=parts.get("must_not"))


def _condition(doc: object, where: str) -> Condition:
    if not isinstance(doc, dict):
        raise _bad(f"{where} must be an object")
    if set(doc) & set(CLAUSES):
        return _filter(doc, where)
    if "has_id" in doc:
        return qe.HasIdCondition(set(_ids(doc["has_id"], where)))
    for name, cls in (("is_empty", qe.IsEmptyCondition), ("is_null", qe.IsNullCondition)):
        if name in doc:
            inner = doc[name]
            if not isinstance(inner, dict) or not isinstance(inner.get("key"), str):
                raise _bad(f"{where}.{name} must be {{'key': FIELD}}")
            return cls(inner["key"])
    key = doc.get("key")
    if not isinstance(key, str) or not key:
        raise _bad(f"{where} names no key (or has_id / is_empty / is_null)")
    extra = set(doc) - {"key", "match", "range"}
    if extra or ("match" in doc) == ("range" in doc):
        raise _bad(f"{where} needs exactly one of match / range (got {sorted(set(doc) - {'key'})})")
    if "range" in doc:
        return qe.FieldCondition(key=key, range=_range(doc["range"], where))
    return qe.FieldCondition(key=key, match=_match(doc["match"], where))


def _ids(value: object, where: str) -> list[str | int]:
    if not isinstance(value, list) or not all(isinstance(x, str | int) for x in value):
        raise _bad(f"{where}.has_id must be a list of point ids")
    return list(value)


def _range(doc: object, where: str) -> qe.RangeFloat:
    if not isinstance(doc, dict) or not doc or set(doc) - set(RANGE_KEYS):
        raise _bad(f"{where}.range takes {', '.join(RANGE_KEYS)}")
    bounds: dict[str, float] = {}
    for k, v in doc.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise _bad(f"{where}.range.{k} must be a number")
        bounds[k] = float(v)
    return qe.RangeFloat(**bounds)


def _match(doc: object, where: str) -> Any:
    if not isinstance(doc, dict) or len(doc) != 1:
        raise _bad(f"{where}.match takes one of value / any / except / text")
    (kind, value), = doc.items()  # fmt: skip
    scalar = (str, int, bool)
    if kind == "value" and isinstance(value, scalar):
        return qe.MatchValue(value)
    if kind in ("any", "except") and isinstance(value, list) and all(isinstance(x, str | int) for x in value):
        return qe.MatchAny(value) if kind == "any" else qe.MatchExcept(value)
    if kind == "text" and isinstance(value, str):
        return qe.MatchText(value)
    raise _bad(f"{where}.match.{kind} is not a valid match (value: a scalar; any/except: a list; text: a string)")


def combined(where: Filter | None, native: object) -> qe.Filter | None:
    """The portable filter and the native one, both required when both are given."""
    parts: list[qe.Filter] = [to_edge(where)] if where is not None else []
    if native is not None:
        parts.append(native if isinstance(native, qe.Filter) else native_filter(native))
    return None if not parts else parts[0] if len(parts) == 1 else qe.Filter(must=list(parts))
