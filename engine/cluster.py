"""Distributed mode's worker process: pull from the shared queue until SIGTERM, with a /metrics port."""

from __future__ import annotations

import asyncio
import logging
import signal

from prometheus_client import start_http_server

from engine.build import build_worker
from engine.config import EngineSettings
from engine.metrics import WORKER_UP

log = logging.getLogger("shoal.worker")


async def serve_worker(settings: EngineSettings, metrics_port: int | None = None) -> None:
    """Connect, preload, serve; the metrics port opens once the worker is ready (a readiness signal)."""
    engine = await build_worker(settings).start()
    WORKER_UP.set(1)
    if metrics_port:
        start_http_server(metrics_port, addr=settings.host)
    allowed = ", ".join(settings.worker_models) if settings.worker_models else "any model"
    log.warning("shoal worker pulling from %s (%s)", settings.queue_url, allowed)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    WORKER_UP.set(0)
    await engine.close()  # unfinished tasks are given back to the queue at once


def run_worker(settings: EngineSettings, metrics_port: int | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve_worker(settings, metrics_port))
