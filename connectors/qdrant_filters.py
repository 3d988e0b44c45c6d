"""Filters for qdrant-client: portable filters translated, and Qdrant's JSON filter parsed whole or refused."""

from __future__ import annotations

import json

from qdrant_client import models

from connectors.base import SearchRequest, StoreError
from connectors.filters import ENTITY, And, Cond, Filter, Or, entity_tag


def to_qdrant(f: Filter) -> models.Filter:
    """A portable filter as Qdrant conditions (must / should / must_not)."""
    if isinstance(f, And):
        return models.Filter(must=[to_qdrant(x) for x in f.items])
    if isinstance(f, Or):
        return models.Filter(should=[to_qdrant(x) for x in f.items])
    return _cond(f)


def _cond(c: Cond) -> models.Filter:
    key, values = c.field, c.values
    if c.field.startswith(ENTITY):
        key, values = "entity_tags", tuple(entity_tag(c.field, v) for v in values)
    if c.op == "in":
        return models.Filter(must=[models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))])
    if c.op in ("eq", "ne"):
        cond = models.FieldCondition(key=key, match=models.MatchValue(value=values[0]))
        return models.Filter(must=[cond]) if c.op == "eq" else models.Filter(must_not=[cond])
    rng = models.Range(**{c.op: values[0]})
    return models.Filter(must=[models.FieldCondition(key=key, range=rng)])


def combined_filter(request: SearchRequest) -> models.Filter | None:
    parts = [to_qdrant(request.where)] if request.where is not None else []
    if request.native is not None:
        try:
            native = request.native if isinstance(request.native, models.Filter) else _native(request.native)
        except ValueError as e:
            msg = str(e).splitlines()
            raise StoreError(f"not a Qdrant filter: {' '.join(msg[:3])[:300]}", code="INVALID_FILTER") from None
        parts.append(native)
    return None if not parts else parts[0] if len(parts) == 1 else models.Filter(must=parts)


def _native(raw: object) -> models.Filter:
    return models.Filter.model_validate(json.loads(raw) if isinstance(raw, str) else raw)
