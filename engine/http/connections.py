"""The connection layer under uvicorn: read deadlines on every head, a head-size limit, JSON protocol errors,
and a connection cap that always leaves room for health probes.

Deadlines: every request head (line and headers) must arrive within `head_timeout_s` of its first byte, the
first on a connection or a later one on a kept-alive or pipelined connection (then 408 and close, or close
once the answer in progress is out); a body must arrive within `body_timeout_s` (the edge answers 408; this
closes the connection a second later if it has not); an idle keep-alive connection is closed after
`keep_alive_s`. Bytes trickling in do not extend any of them. A head over `max_header_bytes` is 431.
`GET /healthz` is answered in the parser's callback, so a liveness probe never waits behind the app.

Cap: past `max_connections`, a new connection closes the longest-idle one (nothing in progress, or only part
of a head), so idle or slow clients can never lock others out; a connection younger than FRESH_S that has
sent nothing yet is not taken for idle (its request may be waiting to be read). When every connection is busy with a
request, up to `health_connections` more are let in for /healthz and /readyz only; anything else on them
gets 503 QUEUE_FULL and the connection closes.

This subclasses uvicorn's httptools protocol and overrides some of its methods, so uvicorn is pinned to one
version in pyproject.toml (tests/test_hardening_connections.py checks the installed one).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from engine.config import EngineSettings
from engine.errors import InvalidInput, QueueFull, RequestTimeout, ShoalError
from engine.tasks.results import JSONObject

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
BODY_GRACE_S = 1.0  # the edge answers a late body with 408 first; this only backs it up
FRESH_S = 0.5  # a new connection is not evicted before its bytes are read or it stays silent this long
HEALTHZ = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{"status":"ok"}'
HEALTHZ_CLOSE = HEALTHZ.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n", 1)
ErrorBody = Callable[[str, ShoalError], JSONObject]  # (path, error) -> the route family's error body


class Connection(Protocol):
    """What the pool needs of a connection: to tell them apart, and to close one to make room."""

    def __hash__(self) -> int: ...
    def drop(self) -> None: ...
    def evictable(self) -> bool: ...


class HeadersTooLarge(ShoalError):
    code, status = "HEADERS_TOO_LARGE", 431


def native_body(path: str, err: ShoalError) -> JSONObject:
    return {"detail": {"code": err.code, "message": err.message}}


def raw_error(err: ShoalError, path: str, body_for: ErrorBody) -> bytes:
    """A whole HTTP/1.1 error response that closes the connection, its body in the path's family shape."""
    data = json.dumps(body_for(path, err), separators=(",", ":")).encode()
    reason = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large"}
    reason |= {503: "Service Unavailable"}
    head = f"HTTP/1.1 {err.status} {reason.get(err.status, 'Error')}\r\ncontent-type: application/json\r\n"
    if err.retry_after is not None:
        head += f"retry-after: {max(1, round(err.retry_after))}\r\n"
    head += f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    return head.encode() + data


def head_end(tail: bytes, data: bytes) -> int:
    """Where in `data` the head that began before it ends (just past its blank line), or -1; `tail` is the
    last bytes of the head so far, so a blank line split across two reads is found."""
    end = data.find(b"\r\n\r\n")
    if tail:
        joined = (tail + data[:3]).find(b"\r\n\r\n")
        if joined >= 0:
            return joined + 4 - len(tail)
    return end + 4 if end >= 0 else -1


class Pool:
    """One server's open connections, with the idle ones in the order they became idle."""

    def __init__(self, cap: int, reserve: int) -> None:
        self.cap = max(1, cap)
        self.reserve = max(0, reserve)
        self.open: set[Connection] = set()
        self.idle: OrderedDict[Connection, None] = OrderedDict()
        self.evicted = 0
        self.refused = 0

    def set_idle(self, conn: Connection, idle: bool) -> None:
        if idle:
            if conn not in self.idle:
                self.idle[conn] = None
        else:
            self.idle.pop(conn, None)

    def admit(self, conn: Connection) -> str:
        """'ok', 'health' (a reserve slot) or 'refuse' for a new connection; past the cap the longest-idle
        connection is closed to make room, never one whose first bytes may not have been read yet (a probe
        that connected a moment before would lose its request unanswered)."""
        if len(self.open) >= self.cap:
            victim = next((c for c in self.idle if c.evictable()), None)  # oldest first; new ones last
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

    def forget(self, conn: Connection) -> None:
        self.open.discard(conn)
        self.idle.pop(conn, None)


def protocol_class(settings: EngineSettings, cap: int, body_for: ErrorBody = native_body) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with this server's deadlines and connection cap (one Pool per class);
    `body_for` shapes the errors it answers itself (the route family's shape for the request's path)."""
    pool = Pool(cap, settings.health_connections)

    async def busy_app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        """The answer on a health-only connection to anything but a health probe."""
        err = QueueFull("every connection is busy; only health probes are served now")
        path = scope["path"] if scope["type"] != "lifespan" else ""
        data = json.dumps(body_for(path, err), separators=(",", ":")).encode()
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"1"), (b"connection", b"close")]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    class ShoalProtocol(HttpToolsProtocol):
        """One connection: its phase ('head' before any byte, 'partial' head, 'body', 'app', 'idle'), its
        deadline, its place in the pool."""

        pool_state = pool

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._deadline: asyncio.TimerHandle | None = None
            self._phase = "head"
            self._head_bytes = 0
            self._head_tail = b""  # the last bytes of a head not yet ended: its end may straddle two reads
            self._born = self.loop.time()
            self._read_any = False  # evictable once it has sent something, or stayed silent FRESH_S
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

        def evictable(self) -> bool:
            return self._read_any or self.loop.time() - self._born >= FRESH_S

        def drop(self) -> None:
            """Close this idle connection to make room for a new one."""
            pool.forget(self)
            self._disarm()
            if not self.transport.is_closing():
                self.transport.close()

        def _answering(self) -> bool:
            """Whether a request on this connection is being worked on or answered."""
            return self.cycle is not None and not self.cycle.response_complete

        def _path(self) -> str:
            url = getattr(self, "url", b"") or b""  # none yet: the native shape
            return url.split(b"?", 1)[0].decode("latin-1")

        def _refuse(self, err: ShoalError) -> None:
            """Answer `err` and close, unless an answer is in progress: then close once it is out."""
            if self.transport.is_closing():
                return
            if self._answering():
                self.cycle.keep_alive = False
                return
            self.transport.write(raw_error(err, self._path(), body_for))
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
                limit = settings.head_timeout_s
                self._refuse(RequestTimeout(f"the request head did not arrive within {limit:g}s"))
            else:  # no byte of a head, an idle keep-alive, or (backing the edge up) a late body
                self.transport.close()

        # -- bytes in ----------------------------------------------------------------------------------

        def data_received(self, data: bytes) -> None:
            self._read_any = True
            if self._phase in ("head", "partial", "idle") and not self.transport.is_closing():
                # counted before the parser sees the bytes: a whole head in one read is bounded too
                end = head_end(self._head_tail, data)
                self._head_bytes += len(data) if end < 0 else end
                self._head_tail = (self._head_tail + data[-3:])[-3:] if end < 0 else b""
                if self._head_bytes > settings.max_header_bytes:
                    limit = settings.max_header_bytes
                    self._refuse(HeadersTooLarge(f"the request head is over {limit:,} bytes (SHOAL_MAX_HEADER_BYTES)"))
                    return
            super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            """A head the parser cannot read: 400 in JSON, in the family shape of its path when it got that far."""
            if self.transport.is_closing():
                return
            self.transport.write(raw_error(InvalidInput("the request is not valid HTTP/1.1"), self._path(), body_for))
            self.transport.close()

        # -- request phases (httptools callbacks) ----------------------------------------------------

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._phase = "partial"  # every head has its deadline, whatever the connection did before
            self._arm(settings.head_timeout_s)
            if not self._answering():
                pool.set_idle(self, True)

        def on_headers_complete(self) -> None:
            self._head_bytes, self._head_tail = 0, b""  # the next head on this connection counts from zero
            if self._liveness_probe():
                return
            self._phase = "body"
            pool.set_idle(self, False)
            self._arm(settings.body_timeout_s + BODY_GRACE_S)
            super().on_headers_complete()

        def _liveness_probe(self) -> bool:
            """GET /healthz answered here, from the parser's callback: no task, no middleware, nothing that
            could wait behind inference (only when no other request on this connection is being answered)."""
            if self._answering() or self.parser.get_method() != b"GET" or self._path() != "/healthz":
                return False
            self._fast = True
            keep = self.parser.should_keep_alive()
            self.transport.write(HEALTHZ if keep else HEALTHZ_CLOSE)
            if not keep:
                self.transport.close()
            return True

        def on_message_complete(self) -> None:
            if getattr(self, "_fast", False):  # a probe answered in on_headers_complete
                self._fast = False
                if not self.transport.is_closing():
                    self._idle()
                return
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
            if self.transport.is_closing() or self._answering():  # closed, or a pipelined request went on
                return
            if self._phase == "app":  # the whole request was read: the connection is idle until the next one
                self._idle()
            elif self._phase == "partial":  # the next head has begun: its deadline runs; it may be evicted
                pool.set_idle(self, True)

        def _idle(self) -> None:
            self._phase = "idle"
            pool.set_idle(self, True)
            self._arm(settings.keep_alive_s)

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            if self._health_only and cycle.scope["path"] not in HEALTH_PATHS:
                cycle.keep_alive = False
                app = busy_app
            super()._start_asgi_task(cycle, app)

    return ShoalProtocol
