"""Turning wire results into what SDK callers get back (same shape as the sie-sdk client returns)."""

from __future__ import annotations

from typing import Any


def to_encode_results(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wire items ({dense: {dims, dtype, values}}...) -> {id?, dense: ndarray, sparse: {...}, multivector}."""
    out = []
    for item in items:
        result: dict[str, Any] = {}
        if item.get("id") is not None:
            result["id"] = item["id"]
        if item.get("dense") is not None:
            result["dense"] = item["dense"]["values"]
        if item.get("sparse") is not None:
            result["sparse"] = {"indices": item["sparse"]["indices"], "values": item["sparse"]["values"]}
        if item.get("multivector") is not None:
            result["multivector"] = item["multivector"]["values"]
        out.append(result)
    return out
