"""The web console: static HTML, CSS and JavaScript served at / and /console/ (no build step, no CDN).

The page holds no data: it asks the API for everything (with the key the user gives it, when the server has
one), so it is served without a key. Pages are ES modules under static/pages/, listed in static/pages.js.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

from engine.errors import ShoalError
from engine.http.replies import RouteFamily

STATIC = Path(__file__).parent / "static"
PUBLIC_PREFIX = "/console/"  # paths the API key does not guard (the page itself, never data)
TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
FILES = {p.relative_to(STATIC).as_posix(): p for p in STATIC.rglob("*") if p.suffix in TYPES}

router = APIRouter(include_in_schema=False)


def is_public(method: str, path: str) -> bool:
    """Whether a request is for the console's page or its assets, which the API key does not guard."""
    return path.startswith(PUBLIC_PREFIX) or (path == "/" and method in ("GET", "HEAD"))


class NotFound(ShoalError):
    code, status = "NOT_FOUND", 404


def _file(name: str) -> Response:
    path = FILES.get(name)
    if path is None:
        raise NotFound(f"no console file {name!r}")
    return FileResponse(path, media_type=TYPES[path.suffix], headers={"Cache-Control": "no-cache"})


@router.get("/")
async def index() -> Response:
    return _file("index.html")


@router.get("/console")
async def console_root() -> Response:
    return RedirectResponse("/")


@router.get("/console/{name:path}")
async def static(name: str) -> Response:
    return _file(name)


FAMILY = RouteFamily(router)
