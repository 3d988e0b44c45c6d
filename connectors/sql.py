"""SQL where-clauses for LanceDB: portable filters translated, and raw filters checked to parse whole."""

from __future__ import annotations

from connectors.base import StoreError
from connectors.filters import ENTITY, And, Cond, Filter, Or, entity_tag, field_kind

_CMP = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def quote(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def literal(value: object) -> str:
    return quote(value) if isinstance(value, str) else repr(value)


def to_sql(f: Filter) -> str:
    """A portable filter as a LanceDB (DataFusion) SQL expression."""
    if isinstance(f, And | Or):
        joiner = " AND " if isinstance(f, And) else " OR "
        return "(" + joiner.join(to_sql(x) for x in f.items) + ")"
    return _cond(f)


def _cond(c: Cond) -> str:
    column, values = c.field, c.values
    if c.field.startswith(ENTITY):
        column, values = "entity_tags", tuple(entity_tag(c.field, v) for v in values)
    value = values[0]
    if (field_kind(c.field) or "").endswith("_list"):
        if c.op == "in":
            return f"array_has_any({column}, make_array({', '.join(literal(v) for v in values)}))"
        has = f"array_has({column}, {literal(value)})"
        return has if c.op == "eq" else f"(NOT {has} OR {column} IS NULL)"
    if c.op == "in":
        return f"{column} IN ({', '.join(literal(v) for v in values)})"
    if c.op == "ne":
        return f"({column} IS NULL OR {column} <> {literal(value)})"
    return f"{column} {_CMP[c.op]} {literal(value)}"


def check_sql(text: str) -> str:
    """A raw SQL filter, refused unless it is one whole expression; returned parenthesised.

    LanceDB's parser stops at the end of the first expression and silently drops the rest
    (`1=1; drop table chunks` runs as `1=1`). Wrapped in parentheses, anything left over is a syntax
    error instead; this check makes sure the text cannot close those parentheses itself.
    """
    depth, i, n = 0, 0, len(text)
    if not text.strip():
        raise StoreError("the filter is empty", code="INVALID_FILTER")
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            end = i + 1
            while True:
                end = text.find(ch, end)
                if end < 0:
                    raise StoreError(f"unterminated {ch} quote in filter {text!r}", code="INVALID_FILTER")
                if text[end + 1 : end + 2] == ch:  # a doubled quote is an escaped quote
                    end += 2
                    continue
                break
            i = end + 1
            continue
        if ch == ";":
            raise StoreError(f"a filter is one expression; ';' is not allowed: {text!r}", code="INVALID_FILTER")
        if text.startswith("--", i) or text.startswith("/*", i):
            raise StoreError(f"comments are not allowed in a filter: {text!r}", code="INVALID_FILTER")
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise StoreError(f"unbalanced ')' in filter {text!r}", code="INVALID_FILTER")
        i += 1
    if depth:
        raise StoreError(f"unbalanced '(' in filter {text!r}", code="INVALID_FILTER")
    return f"({text})"
