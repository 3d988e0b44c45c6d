"""GET /docs (Swagger UI) and /redoc (ReDoc) served offline: their assets come from the fastapi-offline
package, not a CDN, so the API reference works on a machine with no internet."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

from engine.errors import ShoalError

ASSETS_URL = "/docs/assets"
TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}

router = APIRouter(include_in_schema=False)


class AssetMissing(ShoalError):
    code, status = "NOT_FOUND", 404


def assets_dir() -> Path | None:
    """The folder of Swagger UI and ReDoc files inside the fastapi-offline package (found without importing it)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if folder.is_dir() else None


@router.get("/docs")
async def swagger(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} API",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} API",
        redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
        with_google_fonts=False,
    )


@router.get(ASSETS_URL + "/{name}")
async def asset(name: str) -> Response:
    folder = assets_dir()
    path = folder / name if folder is not None else None
    if path is None or path.suffix not in TYPES or path.parent != folder or not path.is_file():
        raise AssetMissing(f"no docs asset {name!r} (is the fastapi-offline package installed?)")
    return FileResponse(path, media_type=TYPES[path.suffix], headers={"Cache-Control": "max-age=86400"})
