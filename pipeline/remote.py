"""`shoal search --url` against a warm server that serves the same store: one HTTP call, nothing loaded here."""

from __future__ import annotations

import os
from typing import Any

from connectors.base import Hit

EMBEDDED = ("lancedb", "qdrant+local", "chroma+local")  # stores in a folder: the same folder from any cwd
SERVER_TOP_K = 100  # POST /v1/search answers at most this many hits


def store_location(db: str) -> str:
    """A store URL with an embedded store's folder made absolute (the same store from any working folder)."""
    scheme, sep, rest = db.partition("://")
    if not sep:  # a bare path is a LanceDB folder
        scheme, sep, rest = "lancedb", "://", db
    if scheme in EMBEDDED and rest:
        return f"{scheme}://{os.path.abspath(os.path.expanduser(rest))}"
    return db


def served_search(
    url: str, query: str, db: str, collection: str | None, top_k: int, mode: str, where: list[str] | None
) -> list[Hit] | None:
    """The hits from the server's own search when it serves `db` (`shoal serve --db`); None when it does not
    (no search there, another store, more hits than it answers, or no answer): the caller searches here."""
    import httpx

    if top_k > SERVER_TOP_K:
        return None
    key = os.environ.get("SHOAL_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    base = url.rstrip("/")
    body: dict[str, Any] = {"query": query, "top_k": top_k, "mode": mode, "where": where or None}
    body["location"] = store_location(db)  # the server answers only for the store it serves (409 otherwise)
    if collection:
        body["collection"] = collection
    try:
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=2.0), headers=headers) as http:
            r = http.post(f"{base}/v1/search", json=body)
        parsed = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
    except (httpx.HTTPError, ValueError):
        return None  # the usual path reports what is wrong with the server, with its exit code
    answer: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    if r.status_code in (404, 405, 409) and not _store_error(answer):  # no search there, or another store
        return None
    if r.status_code == 400 and "location" in str(answer.get("detail", "")):  # a server without `location`
        return None
    if r.status_code != 200:
        from pipeline.config import ConfigError

        raw = answer.get("detail")
        detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
        raise ConfigError(str(detail.get("message") or r.text[:300]), code=str(detail.get("code") or "INVALID_INPUT"))
    hits = []
    for h in answer.get("hits", []):
        meta = {k: v for k, v in h.items() if k not in ("id", "score", "text")}
        hits.append(Hit(str(h["id"]), float(h["score"]), str(h.get("text", "")), meta))
    return hits


def _store_error(answer: dict[str, Any]) -> bool:
    """A 404 about the served store itself (its collection), which the user should see as it is."""
    detail = answer.get("detail")
    return isinstance(detail, dict) and detail.get("code") in ("NO_COLLECTION", "NO_STORE")
