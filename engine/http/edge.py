"""The edge: one ASGI middleware in front of every route. It checks the credentials, bounds the body while it
streams (size and time), notices a client that hung up, counts every request with bounded labels, and turns
any error into the route family's error body (never a bare 500).

Order for one request: health probes pass straight through; a key in the URL is refused; the key is
matched and rate-limited; a declared body over the limit is 413 before a byte is kept; the route runs
with a `receive` that stops at the size limit (413) or the body deadline (408); once the body is in, a
watcher waits for the client to hang up and cancels the route if it does (counted as code 499).

Before a 413 goes out, up to DRAIN_BYTES more of the body are read and thrown away (for DRAIN_S at most):
closing a socket with unread bytes in it resets the connection, and a client still writing its body would
see the reset instead of the 413.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.errors import (
    InternalError,
    PayloadTooLarge,
    RateLimited,
    RequestTimeout,
    ShoalError,
    Unauthorized,
    UnsupportedMediaType,
)
from engine.http.auth import METRICS_REFUSAL, Auth, bearer, key_in_query
from engine.http.redact import Scrub
from engine.metrics import LATENCY, REQUESTS

log = logging.getLogger("shoal.http")
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
ENDPOINTS = frozenset({"encode", "score", "extract", "embeddings", "rerank", "models", "tools", "embed"})
ENDPOINTS |= {"embed_sparse", "predict", "tokenize", "info", "status", "search"}
DRAIN_BYTES = 16 * 1024 * 1024  # body bytes read and dropped before a 413, so that the client gets to read it
DRAIN_S = 1.0  # ... for this long at most (a client that stalls gets its 413 then)
CLIENT_CLOSED = "499"  # the code label of a request whose client hung up before its answer
Respond = Callable[[str, ShoalError], Response]  # (path, error) -> the route family's error response
Public = Callable[[str, str], bool]  # (method, path) -> True for a request no key guards


def endpoint_label(path: str) -> str:
    """A bounded endpoint label: /v1/encode/x -> encode, /embed -> embed, /infinity/rerank -> rerank, anything
    unknown -> other."""
    parts = [p for p in path.split("/") if p]
    if parts and parts[0] in ("v1", "v2", "infinity"):
        parts = parts[1:]
    return parts[0] if parts and parts[0] in ENDPOINTS else "other"


@dataclass
class Exchange:
    """What the edge learns about one request while it runs."""

    received: int = 0
    body_done: bool = False
    started: bool = False  # a response start went to the client
    status: int = 0
    disconnected: bool = False
    error: ShoalError | None = None  # raised by the edge inside the route; it answers instead of the route


class Edge:
    """The middleware; `respond(path, error)` is the route family's error response for a path."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: EngineSettings,
        auth: Auth,
        catalogue: Catalogue,
        respond: Respond,
        scrub: Scrub | None = None,
        public: Public | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.auth = auth
        self.catalogue = catalogue
        self.respond = respond
        self.scrub = scrub  # applied to every error body a route sends (None: bodies pass unchanged)
        self.public = public  # requests that need no key (the console's static files), limits still apply

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in HEALTH_PATHS:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        ex = Exchange()
        path: str = scope["path"]
        try:
            self._admit(scope)
            await self._run(scope, receive, send, ex)
        except asyncio.CancelledError:
            if not ex.disconnected:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the cancel was ours (the client hung up): the connection's task goes on
        except ShoalError as e:
            if e.status in (413, 415) and not ex.body_done:  # refused unread: drop what is on its way
                await self._drain(scope, receive, ex)
            await self._answer(scope, send, ex, e)
        except Exception:  # noqa: BLE001 - last resort: a typed 500, and the server stays up
            if not ex.disconnected:  # a hang-up mid-body surfaces as the route's ClientDisconnect: no error
                log.exception("unhandled error on %s", path)
                await self._answer(
                    scope, send, ex, ex.error or InternalError("internal error; the server log has the details")
                )
        if path != "/metrics":
            self._count(scope, ex, started)

    # -- before the route --------------------------------------------------------------------------

    def _admit(self, scope: Scope) -> None:
        """Credentials, rate limit and a declared body size; raises the error to answer."""
        auth, path = self.auth, scope["path"]
        if path == "/metrics" and auth.metrics_keys is not None:
            token = bearer(scope["headers"])
            if token is None or auth.metrics_keys.match(token) is None:
                raise Unauthorized(METRICS_REFUSAL)
        elif auth.keys is not None and not (self.public and self.public(scope["method"], path)):
            if key_in_query(scope.get("query_string", b"")):
                raise Unauthorized(
                    "API keys in the URL are refused (URLs end up in logs); send 'Authorization: Bearer <key>'"
                )
            token = bearer(scope["headers"])
            key = auth.keys.match(token) if token is not None else None
            if key is None:
                raise Unauthorized("missing or wrong API key; send 'Authorization: Bearer <key>'")
            if auth.limiter is not None and path != "/metrics":
                wait = auth.limiter.take(key)
                if wait is not None:
                    raise RateLimited(
                        f"this API key is over its rate of {auth.limiter.rate:g} requests/s", retry_after=wait
                    )
        limit = self.settings.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise PayloadTooLarge(
                    f"body of {int(value):,} bytes is over the limit of {limit:,} (SHOAL_MAX_BODY_BYTES)"
                )
            if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                encoding = value.decode("latin-1")[:40]
                raise UnsupportedMediaType(
                    f"Content-Encoding {encoding!r} is not supported; send the body uncompressed"
                )

    # -- the route, with a bounded receive and a hang-up watcher -------------------------------------

    async def _run(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.body_timeout_s
        limit = self.settings.max_body_bytes
        route = asyncio.current_task()
        watcher: asyncio.Task[Message] | None = None

        def hung_up(t: asyncio.Task[Message]) -> None:
            if t.cancelled() or t.exception() is not None:
                return
            if t.result()["type"] == "http.disconnect" and not ex.started and route is not None:
                ex.disconnected = True
                route.cancel()

        async def bounded_receive() -> Message:
            nonlocal watcher
            if watcher is not None:  # the body is in: further reads wait for the client to go
                return await asyncio.shield(watcher)
            try:
                async with asyncio.timeout_at(deadline):  # no task per read, unlike wait_for
                    message = await receive()
            except TimeoutError:
                ex.error = RequestTimeout(
                    f"the body did not arrive within {self.settings.body_timeout_s:g}s (SHOAL_BODY_TIMEOUT_S)"
                )
                raise ex.error from None
            if message["type"] == "http.disconnect":
                ex.disconnected = True
                return message
            ex.received += len(message.get("body", b""))
            if ex.received > limit:
                ex.error = PayloadTooLarge(
                    f"body of more than {limit:,} bytes is over the limit (SHOAL_MAX_BODY_BYTES)"
                )
                raise ex.error
            if not message.get("more_body", False):
                ex.body_done = True
                watcher = asyncio.ensure_future(receive())
                watcher.add_done_callback(hung_up)
            return message

        held: list[Message] = []  # an error response, held until its body is whole and scrubbed

        async def tracked_send(message: Message) -> None:
            if ex.error is not None:  # the edge answers this request itself
                return
            if message["type"] == "http.response.start":
                ex.started, ex.status = True, int(message["status"])
                if ex.status >= 400 and self.scrub is not None:
                    held.append(message)
                    return
            elif held:
                held.append(message)
                if message.get("more_body", False):
                    return
                await send_scrubbed(held)
                return
            await send(message)

        async def send_scrubbed(messages: list[Message]) -> None:
            assert self.scrub is not None
            start, body = messages[0], b"".join(m.get("body", b"") for m in messages[1:])
            data = self.scrub(body.decode("utf-8", "replace")).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(data)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": data})

        try:
            await self.app(scope, bounded_receive, tracked_send)
        finally:
            if watcher is not None and not watcher.done():
                watcher.remove_done_callback(hung_up)
                watcher.cancel()
        if ex.disconnected:
            return
        if ex.error is not None:
            raise ex.error

    # -- answers and counts ------------------------------------------------------------------------

    async def _drain(self, scope: Scope, receive: Receive, ex: Exchange) -> None:
        """Read and drop the rest of a refused body, DRAIN_BYTES and DRAIN_S at most (nothing when its declared
        length is beyond that: the connection is reset whatever we do)."""
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) - ex.received > DRAIN_BYTES:
            return
        dropped = 0
        with contextlib.suppress(TimeoutError, OSError, RuntimeError):
            async with asyncio.timeout(DRAIN_S):
                while dropped <= DRAIN_BYTES:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        ex.disconnected = True
                        return
                    dropped += len(message.get("body", b""))
                    if not message.get("more_body", False):
                        return

    async def _answer(self, scope: Scope, send: Send, ex: Exchange, err: ShoalError) -> None:
        """The error in the route family's shape (unless an answer already started or nobody listens)."""
        if ex.started or ex.disconnected:
            return
        ex.started, ex.status = True, err.status
        response = self.respond(scope["path"], err)

        async def nothing() -> Message:
            return {"type": "http.disconnect"}

        with contextlib.suppress(OSError, RuntimeError):  # the client may be gone already
            await response(scope, nothing, send)

    def _count(self, scope: Scope, ex: Exchange, started: float) -> None:
        """One sample per request: endpoint and code from fixed sets, model a catalogue id or "unknown"."""
        model = scope.get("shoal_model")
        label = model if isinstance(model, str) and self.catalogue.is_listed(model) else "unknown"
        code = CLIENT_CLOSED if ex.disconnected else str(ex.status or 500)
        endpoint = endpoint_label(scope["path"])
        REQUESTS.labels(endpoint, label, code).inc()
        LATENCY.labels(endpoint, label).observe(time.perf_counter() - started)
