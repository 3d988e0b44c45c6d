"""Running the app: uvicorn with the connection layer (deadlines, cap), the descriptor limit raised to fit
the cap, and /metrics on its own port when configured."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from engine.config import EngineSettings
from engine.http.connections import native_body, protocol_class

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


def serve_app(app: FastAPI, settings: EngineSettings, log_level: str = "info") -> None:
    """Serve until SIGINT/SIGTERM."""
    import uvicorn

    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, addr=settings.host)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        http=protocol_class(settings, connection_cap(settings), getattr(app.state, "error_body", native_body)),
        timeout_keep_alive=max(1, round(settings.keep_alive_s)),
    )
    uvicorn.Server(config).run()
