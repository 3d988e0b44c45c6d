"""The connection layer under uvicorn: read deadlines per connection, and a connection cap that always leaves
room for health probes.

Deadlines: a new connection must deliver its request line and headers within `head_timeout_s` (then 408 and
close); a body must arrive within `body_timeout_s` (the edge answers 408; this closes the connection a
second later if it has not); an idle keep-alive connection is closed after `keep_alive_s`. Bytes trickling
in do not extend any of them.

Cap: past `max_connections`, a new connection closes the longest-idle one (no request in progress, or
only part of a head), so idle or slow clients can never lock others out. When every connection is busy
with a request, up to `health_connections` more are let in for /healthz and /readyz only; anything else
on them gets 503 QUEUE_FULL and the connection closes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from engine.config import EngineSettings

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
BODY_GRACE_S = 1.0  # the edge answers a late body with 408 first; this only backs it up
BUSY = b'{"detail":{"code":"QUEUE_FULL","message":"every connection is busy; only health probes are served now"}}'


class Pool:
    """One server's open connections, with the idle ones in the order they became idle."""

    def __init__(self, cap: int, reserve: int) -> None:
        self.cap = max(1, cap)
        self.reserve = max(0, reserve)
        self.open: set[Any] = set()
        self.idle: OrderedDict[Any, None] = OrderedDict()
        self.evicted = 0
        self.refused = 0

    def set_idle(self, conn: Any, idle: bool) -> None:
        if idle:
            self.idle[conn] = None
            self.idle.move_to_end(conn)
        else:
            self.idle.pop(conn, None)

    def admit(self, conn: Any) -> str:
        """'ok', 'health' (a reserve slot) or 'refuse' for a new connection; past the cap the longest-idle
        connection is closed to make room."""
        if len(self.open) >= self.cap:
            victim = next(iter(self.idle), None)
            if victim is not None:
                self.evicted += 1
                victim.drop()
            elif len(self.open) >= self.cap + self.reserve:
                self.refused += 1
                return "refuse"
            else:
                self.open.add(conn)
                return "health"
        self.open.add(conn)
        return "ok"

    def forget(self, conn: Any) -> None:
        self.open.discard(conn)
        self.idle.pop(conn, None)


async def busy_app(scope: Any, receive: Any, send: Any) -> None:
    """The answer on a health-only connection to anything but a health probe."""
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1"), (b"connection", b"close")]
    headers.append((b"content-length", str(len(BUSY)).encode()))
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": BUSY})


def protocol_class(settings: EngineSettings, cap: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with this server's deadlines and connection cap (one Pool per class)."""
    pool = Pool(cap, settings.health_connections)

    class ShoalProtocol(HttpToolsProtocol):
        """One connection: its phase ('head', 'body', 'app', 'idle'), its deadline, its place in the pool."""

        pool_state = pool

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._deadline: asyncio.TimerHandle | None = None
            self._phase = "head"
            self._health_only = False
            admitted = pool.admit(self)
            if admitted == "refuse":
                transport.abort()
                return
            self._health_only = admitted == "health"
            pool.set_idle(self, True)
            self._arm(settings.head_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            pool.forget(self)
            self._disarm()
            super().connection_lost(exc)

        def drop(self) -> None:
            """Close this idle connection to make room for a new one."""
            pool.forget(self)
            self._disarm()
            if not self.transport.is_closing():
                self.transport.close()

        # -- deadlines -------------------------------------------------------------------------------

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if getattr(self, "_deadline", None) is not None:
                assert self._deadline is not None
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self._phase == "partial":  # part of a head came: say why it is closed
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

        # -- request phases (httptools callbacks) ----------------------------------------------------

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._phase == "idle":  # a new request on a kept-alive connection: its head has a deadline now
                self._arm(settings.head_timeout_s)
            self._phase = "partial"

        def on_headers_complete(self) -> None:
            self._phase = "body"
            pool.set_idle(self, False)
            self._arm(settings.body_timeout_s + BODY_GRACE_S)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            if self._phase != "body":
                return
            if self.cycle is not None and self.cycle.response_complete:  # answered before its body was in
                self._idle()
            else:
                self._phase = "app"
                self._disarm()  # the request's own deadline bounds the work now

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or self.pipeline:
                return
            if self._phase == "app":  # the whole request was read: the connection is idle until the next one
                self._idle()

        def _idle(self) -> None:
            self._phase = "idle"
            pool.set_idle(self, True)
            self._arm(settings.keep_alive_s)

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
            if self._health_only and cycle.scope["path"] not in HEALTH_PATHS:
                cycle.keep_alive = False
                app = busy_app
            super()._start_asgi_task(cycle, app)

    return ShoalProtocol
