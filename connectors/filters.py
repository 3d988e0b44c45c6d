"""Portable metadata filters: (field, op, value) conditions joined by and/or, parsed from CLI text or JSON.

Each connector translates a Filter into its own dialect (SQL, Qdrant conditions, Chroma `where`, Weaviate
filters). On list fields (pages, heading_path, classes, entity:LABEL) `eq` means "holds this value".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

Op = Literal["eq", "ne", "in", "gt", "gte", "lt", "lte"]
OPS: tuple[str, ...] = ("eq", "ne", "in", "gt", "gte", "lt", "lte")
RANGE_OPS = {"gt", "gte", "lt", "lte"}
ENTITY = "entity:"
Scalar = str | int | float | bool  # a value a condition compares with

# The chunk fields every store keeps filterable (name -> kind); entities add `entity:<label>` (a str list).
FIELDS: dict[str, str] = {
    "id": "str",
    "source": "str",
    "root": "str",
    "title": "str",
    "kind": "str",
    "doc_hash": "str",
    "chunk_hash": "str",
    "chunk_index": "int",
    "n_tokens": "int",
    "char_start": "int",
    "char_end": "int",
    "ingested_at": "float",
    "pages": "int_list",
    "heading_path": "str_list",
    "classes": "str_list",
}
_CLI = re.compile(r"^\s*(?P<field>[A-Za-z_][\w]*(?::[^=!<>]+?)?)\s*(?P<op>!=|>=|<=|=|>|<)(?P<value>.*)$", re.S)
_CLI_OPS = {"=": "eq", "!=": "ne", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


class FilterError(ValueError):
    """A filter that cannot run: bad syntax, an unknown field, a wrong value type."""

    def __init__(self, message: str, code: str = "INVALID_FILTER") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class Cond:
    """One condition: `field op value` (`value` is a tuple for `in`)."""

    field: str
    op: Op
    value: Scalar | tuple[Scalar, ...]

    @property
    def values(self) -> tuple[Scalar, ...]:
        """The values of an `in`; the one value of any other op."""
        return self.value if isinstance(self.value, tuple) else (self.value,)

    @property
    def scalar(self) -> Scalar:
        """The one value of a condition other than `in` (its first value for an `in`)."""
        return self.value[0] if isinstance(self.value, tuple) else self.value


@dataclass(frozen=True)
class And:
    """Every item holds."""

    items: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    """At least one item holds."""

    items: tuple[Filter, ...]


Filter: TypeAlias = "Cond | And | Or"


def field_kind(name: str) -> str | None:
    """The kind of a filterable field (str, int, float, str_list, int_list), or None when unknown."""
    if name.startswith(ENTITY) and len(name) > len(ENTITY):
        return "str_list"
    return FIELDS.get(name)


def entity_tag(name: str, value: Scalar) -> str:
    """`entity:org` = Acme is stored as the tag "org:Acme" in `entity_tags`."""
    return f"{name[len(ENTITY) :]}:{value}"


def cond(field: str, op: str, value: object) -> Cond:
    """A checked condition: known op, value coerced to the field's type (unknown fields are checked later)."""
    if op not in OPS:
        raise FilterError(f"unknown filter op {op!r} (known: {', '.join(OPS)})")
    kind = field_kind(field) or "str"
    if op in RANGE_OPS and kind not in ("int", "float"):
        raise FilterError(f"{op} needs a numeric field; {field!r} holds {kind.replace('_list', ' lists')}")
    if op == "in":
        values = value if isinstance(value, list | tuple) else [value]
        if not values:
            raise FilterError(f"'in' on {field!r} needs at least one value")
        return Cond(field, "in", tuple(_coerce(field, kind, v) for v in values))
    return Cond(field, op, _coerce(field, kind, value))  # type: ignore[arg-type]


def _coerce(field: str, kind: str, value: object) -> Scalar:
    base = kind.removesuffix("_list")
    if base in ("int", "float"):
        try:
            number = float(str(value)) if base == "float" else int(str(value).strip())
        except ValueError:
            raise FilterError(f"{field!r} holds numbers; {value!r} is not one") from None
        return number
    if not isinstance(value, str | int | float | bool):
        raise FilterError(f"{field!r}: value {value!r} must be a string or a number")
    return str(value)


def parse_cli(text: str) -> Filter:
    """One `--where`: FIELD=VALUE, FIELD!=VALUE, FIELD>N (>=, <, <=); `A|B` means any of; JSON is accepted too."""
    if text.lstrip().startswith("{"):
        try:
            return from_json(json.loads(text))
        except json.JSONDecodeError as e:
            raise FilterError(f"--where JSON does not parse: {e.msg} at column {e.colno}") from None
    m = _CLI.match(text)
    if not m:
        raise FilterError(f"cannot read filter {text!r}; write FIELD=VALUE (or !=, >, >=, <, <=)")
    field, op, raw = m["field"].strip(), _CLI_OPS[m["op"]], m["value"].strip()
    alternatives = [v.replace("\\|", "|") for v in re.split(r"(?<!\\)\|", raw)]
    if len(alternatives) > 1:
        if op == "eq":
            return cond(field, "in", alternatives)
        if op == "ne":
            return And(tuple(cond(field, "ne", v) for v in alternatives))
        raise FilterError(f"{text!r}: alternatives (A|B) go with = or !=")
    return cond(field, op, alternatives[0])


def from_json(obj: object) -> Filter:
    """{"field", "op", "value"}, {"and": [...]} or {"or": [...]}, nested as deep as needed."""
    if isinstance(obj, dict) and set(obj) in ({"and"}, {"or"}):
        key = next(iter(obj))
        items = obj[key]
        if not isinstance(items, list) or not items:
            raise FilterError(f"{key!r} needs a non-empty list of filters")
        parts = tuple(from_json(x) for x in items)
        return parts[0] if len(parts) == 1 else (And(parts) if key == "and" else Or(parts))
    if isinstance(obj, dict) and {"field", "value"} <= set(obj) <= {"field", "op", "value"}:
        if not isinstance(obj["field"], str):
            raise FilterError("a filter's field must be a string")
        return cond(obj["field"], obj.get("op", "eq"), obj["value"])
    raise FilterError(
        f"not a filter: {json.dumps(obj)[:200]} (want {{field, op, value}}, {{and: [...]}}, {{or: [...]}})"
    )


def parse(where: object) -> Filter | None:
    """Whatever the SDK was given: None, a Filter, one CLI string, a list of them (all must hold), or JSON."""
    if where is None or isinstance(where, Cond | And | Or):
        return where
    if isinstance(where, str):
        return parse_cli(where)
    if isinstance(where, list | tuple):
        parts = tuple(p for p in (parse(w) for w in where) if p is not None)
        return None if not parts else parts[0] if len(parts) == 1 else And(parts)
    if isinstance(where, dict):
        return from_json(where)
    raise FilterError(f"cannot use {type(where).__name__} as a filter")


def conditions(f: Filter) -> list[Cond]:
    """Every condition in a filter tree."""
    if isinstance(f, Cond):
        return [f]
    return [c for item in f.items for c in conditions(item)]


def check_fields(f: Filter | None, entity_labels: list[str] | None = None, classes: bool = True) -> None:
    """Fail fast on a field the collection does not have (entity labels come from its entities step)."""
    for c in conditions(f) if f is not None else []:
        if c.field.startswith(ENTITY):
            label = c.field[len(ENTITY) :]
            if entity_labels is None:
                raise FilterError(f"unknown filter field {c.field!r}: this collection has no entities", "UNKNOWN_FIELD")
            if label not in entity_labels:
                known = ", ".join(ENTITY + x for x in entity_labels)
                raise FilterError(f"unknown filter field {c.field!r}; entity fields here: {known}", "UNKNOWN_FIELD")
        elif c.field not in FIELDS or (c.field == "classes" and not classes):
            known = ", ".join(sorted(k for k in FIELDS if classes or k != "classes"))
            extra = ", entity:LABEL" if entity_labels else ""
            raise FilterError(f"unknown filter field {c.field!r}; known: {known}{extra}", "UNKNOWN_FIELD")


def matches(f: Filter, row: Mapping[str, object]) -> bool:
    """Evaluate a filter on one row in Python (the reference the store translations are tested against)."""
    if isinstance(f, And):
        return all(matches(x, row) for x in f.items)
    if isinstance(f, Or):
        return any(matches(x, row) for x in f.items)
    have: object
    wanted: tuple[Scalar, ...]
    if f.field.startswith(ENTITY):
        have, wanted = row.get("entity_tags") or [], tuple(entity_tag(f.field, v) for v in f.values)
    else:
        have, wanted = row.get(f.field), f.values
    if isinstance(have, list | tuple):
        hits = [v in have for v in wanted]
        return any(hits) if f.op in ("eq", "in") else not any(hits) if f.op == "ne" else False
    if f.op in ("eq", "in"):
        return have in wanted
    if f.op == "ne":
        return have != wanted[0]
    want = wanted[0]
    if not isinstance(have, int | float) or not isinstance(want, int | float):
        return False
    return {"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}[f.op]
