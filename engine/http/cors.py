"""CORS (Starlette's middleware, configured by SHOAL_CORS_ORIGINS) whose refused preflight is an error in the
path's route family shape, like every other answer, instead of Starlette's text/plain line."""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.errors import Forbidden, ShoalError

Respond = Callable[[str, ShoalError], Response]  # (path, error) -> the family's error response


class JsonCors(CORSMiddleware):
    """CORSMiddleware with `respond` answering the preflights it refuses (403 FORBIDDEN, naming what)."""

    def __init__(self, app: ASGIApp, respond: Respond, origins: list[str]) -> None:
        super().__init__(
            app,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "accept"],
        )
        self.respond = respond

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = Headers(scope=scope)
            if "origin" in headers and "access-control-request-method" in headers:
                response = self.preflight_response(request_headers=headers)
                if response.status_code == 400:  # Starlette's "Disallowed CORS origin, method, headers"
                    what = bytes(response.body).decode("latin-1").removeprefix("Disallowed CORS ")
                    err = Forbidden(f"this CORS request is not allowed: its {what} (SHOAL_CORS_ORIGINS)")
                    response = self.respond(scope["path"], err)
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
