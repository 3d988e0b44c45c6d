"""Replies read back at a boundary (an HTTP client's response, a NATS worker's answer), checked against their
type once there: a malformed one is a clear INTERNAL error naming the field, never a half-read result."""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast, overload

from pydantic import TypeAdapter, ValidationError

from engine.errors import InternalError
from engine.tasks.results import EncodeReply, ExtractReply, Reply, ScoreReply

T = TypeVar("T")
Kind = Literal["encode", "score", "extract"]
SHAPES: dict[str, type[Any]] = {"encode": EncodeReply, "score": ScoreReply, "extract": ExtractReply}


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(shape: type[Any]) -> TypeAdapter[Any]:
    """The validator of one reply type, built on first use (building one takes milliseconds)."""
    if shape not in _ADAPTERS:
        _ADAPTERS[shape] = TypeAdapter(shape)
    return _ADAPTERS[shape]


def checked(shape: type[T], body: object, where: str) -> T:
    """`body` validated as `shape` (a TypedDict of engine.tasks.results); InternalError naming the first field
    that is wrong, and where the body came from."""
    try:
        return cast(T, _adapter(shape).validate_python(body))
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "the body"
        raise InternalError(f"{where} is malformed: {field}: {first['msg']}") from None


@overload
def checked_reply(kind: Literal["encode"], body: object, where: str) -> EncodeReply: ...
@overload
def checked_reply(kind: Literal["score"], body: object, where: str) -> ScoreReply: ...
@overload
def checked_reply(kind: Literal["extract"], body: object, where: str) -> ExtractReply: ...
@overload
def checked_reply(kind: str, body: object, where: str) -> Reply: ...


def checked_reply(kind: str, body: object, where: str) -> Reply:
    """A task kind's reply, checked (an unknown kind is malformed too)."""
    shape = SHAPES.get(kind)
    if shape is None:
        raise InternalError(f"{where} names no task kind shoal knows ({kind!r})")
    return cast(Reply, checked(shape, body, where))
