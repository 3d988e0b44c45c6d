"""Errors the tools raise: the engine's typed errors plus the few that only tools can meet."""

from __future__ import annotations

from engine.errors import Forbidden, InvalidInput, PayloadTooLarge, ShoalError

__all__ = [
    "CollectionNotFound",
    "Forbidden",
    "InvalidInput",
    "PayloadTooLarge",
    "ShoalError",
    "TaxonomyError",
    "ToolNotFound",
]


class ToolNotFound(ShoalError):
    code, status = "TOOL_NOT_FOUND", 404


class CollectionNotFound(ShoalError):
    code, status = "COLLECTION_NOT_FOUND", 404


class TaxonomyError(InvalidInput):
    """A taxonomy that cannot be used: malformed, cyclic, empty or too large (400 INVALID_INPUT)."""


def check_text(where: str, text: str, limit: int) -> None:
    """413 for a text longer than the tools accept, naming the argument and the setting."""
    if len(text) > limit:
        raise PayloadTooLarge(
            f"{where}: {len(text):,} characters is over the limit of {limit:,} (SHOAL_TOOLS_MAX_TEXT_CHARS)"
        )


def check_count(where: str, n: int, limit: int) -> None:
    if n > limit:
        raise PayloadTooLarge(f"{where}: {n:,} items is over the limit of {limit:,} (SHOAL_TOOLS_MAX_TEXTS)")
