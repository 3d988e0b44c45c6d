"""Running a server: uvicorn with the connection layer (deadlines, cap), the descriptor limit raised to fit
the cap, and /metrics on its own port when configured (behind the metrics key when one is set); the one HTTP
layer of `shoal serve` and `shoal mcp --transport http`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from fastapi import FastAPI

from engine.config import EngineSettings
from engine.errors import Unauthorized
from engine.http.auth import METRICS_REFUSAL, KeyRing, auth_from, bearer
from engine.http.connections import ErrorBody, native_body, protocol_class

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

log = logging.getLogger("shoal.http")
SPARE_FDS = 128  # descriptors kept for model files, sockets to NATS, logs


def descriptor_limit(wanted: int) -> int:
    """The process's open-file limit, raised towards `wanted` within the hard limit (Linux and macOS)."""
    try:
        import resource
    except ImportError:  # no rlimits on this platform: assume the common default
        return 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft if soft != resource.RLIM_INFINITY else wanted


def connection_cap(settings: EngineSettings) -> int:
    """max_connections, lowered when the descriptor limit could not fit it, its reserve and SPARE_FDS: a
    health probe must always find a descriptor to be accepted on."""
    wanted = settings.max_connections + settings.health_connections + SPARE_FDS
    limit = descriptor_limit(wanted)
    cap = min(settings.max_connections, limit - settings.health_connections - SPARE_FDS)
    if cap < settings.max_connections:
        log.warning("max_connections lowered to %d to fit the open-file limit of %d (ulimit -n)", cap, limit)
    return max(1, cap)


def metrics_app(keys: KeyRing | None) -> WSGIApplication:
    """Prometheus's WSGI app, behind `Authorization: Bearer <key>` when `keys` (the metrics key, else the API
    keys) are set."""
    from prometheus_client import make_wsgi_app

    inner: WSGIApplication = make_wsgi_app()
    if keys is None:
        return inner

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        token = bearer([(b"authorization", environ.get("HTTP_AUTHORIZATION", "").encode("latin-1"))])
        if token is not None and keys.match(token) is not None:
            return inner(environ, start_response)
        err = Unauthorized(METRICS_REFUSAL)
        body = json.dumps({"detail": err.to_dict()}).encode()
        headers = [("Content-Type", "application/json"), ("WWW-Authenticate", "Bearer")]
        start_response("401 Unauthorized", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def start_metrics_server(settings: EngineSettings) -> WSGIServer:
    """/metrics on its own port, in a daemon thread, behind the same keys as on the API port: SHOAL_METRICS_KEY,
    else the API keys (open only when neither is set)."""
    keys = auth_from(settings).metrics_keys
    server = make_server(settings.host, settings.metrics_port or 0, metrics_app(keys), _ThreadingServer, _QuietHandler)
    threading.Thread(target=server.serve_forever, name="shoal-metrics", daemon=True).start()
    return server  # serving until the process ends, or its shutdown()


def uvicorn_config(
    app: ASGIApp, settings: EngineSettings, log_level: str = "info", body_for: ErrorBody = native_body, **more: Any
) -> uvicorn.Config:
    """uvicorn's config for any shoal server on a network (`shoal serve`, `shoal mcp --transport http`): the
    connection layer's head and body deadlines, keep-alive, header limit and connection cap (engine.http.connections),
    with `body_for` shaping the errors that layer answers itself. `more`: uvicorn's own options (host, port...)."""
    import uvicorn

    options: dict[str, Any] = {"host": settings.host, "port": settings.port, **more}
    return uvicorn.Config(
        app,
        log_level=log_level,
        http=protocol_class(settings, connection_cap(settings), body_for),
        timeout_keep_alive=max(1, round(settings.keep_alive_s)),
        **options,
    )


def serve_app(app: FastAPI, settings: EngineSettings, log_level: str = "info") -> None:
    """Serve until SIGINT/SIGTERM."""
    import uvicorn

    if settings.metrics_port is not None:
        start_metrics_server(settings)
    body_for = getattr(app.state, "error_body", native_body)
    uvicorn.Server(uvicorn_config(app, settings, log_level, body_for)).run()
