"""HTTP clients for a shoal server: AsyncClient is the one implementation; Client runs it on a loop thread."""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

import httpx

from engine.client.calls import ModelCalls
from engine.client.retry import RetryPolicy, retry_after_seconds
from engine.errors import InternalError, ShoalError, Unreachable, error_from_code
from engine.tasks.checked import checked_reply
from engine.tasks.extract import ExtractBody
from engine.tasks.requests import EncodeBody, ScoreBody
from engine.tasks.results import EncodeReply, ExtractReply, ScoreReply
from engine.wire import JSON, MSGPACK, Decoded, decode_body, dumps_json, packb


def raise_for_error(response: httpx.Response) -> None:
    """Turn a non-2xx reply into the typed ShoalError its code names."""
    if response.status_code < 400:
        return
    retry = retry_after_seconds(response.headers.get("retry-after"))
    try:
        body = decode_body(response.content, response.headers.get("content-type"))
    except ShoalError:
        body = None
    detail = (body.get("detail") or body.get("error")) if isinstance(body, dict) else None
    code = detail.get("code") if isinstance(detail, dict) else None
    message = detail.get("message") if isinstance(detail, dict) else None
    err = error_from_code(
        code if isinstance(code, str) else "", message if isinstance(message, str) else response.text, retry
    )
    if isinstance(err, InternalError):
        err.status = response.status_code
    raise err


class ClientOptions(TypedDict, total=False):
    """How an HTTP client talks to its server (AsyncClient and Client take the same)."""

    api_key: str | None  # sent as 'Authorization: Bearer KEY'
    timeout: float  # seconds per request (default 300)
    use_json: bool  # JSON bodies instead of msgpack
    max_items: int | None  # items per request; default: the server's /info cap
    retry: RetryPolicy | None  # Retry-After handling; default RetryPolicy()


FALLBACK_ITEM_CAP = 512  # items per request when the server does not say its cap (GET /info)


class AsyncClient(ModelCalls):
    """Talks to `shoal serve` (or any SIE-compatible server) over HTTP; msgpack by default.

    Calls with more items than the server takes in one request (its `/info` `max_client_batch_size`, read
    once; `max_items` overrides it) are split into requests of that size, `stream_window` in flight. A request
    answered 503 MODEL_LOADING / QUEUE_FULL / RESOURCE_EXHAUSTED is sent again after its Retry-After, within
    `retry` (default `RetryPolicy()`: 5 attempts, 120 s of waiting in all; `RetryPolicy(attempts=1)` never retries).
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", **options: Unpack[ClientOptions]) -> None:
        api_key = options.get("api_key")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, timeout=options.get("timeout", 300.0), headers=headers)
        self._json = options.get("use_json", False)
        self._cap = options.get("max_items")
        self.retry = options.get("retry") or RetryPolicy()

    async def item_cap(self) -> int:
        """The server's per-request item limit, asked once (GET /info); FALLBACK_ITEM_CAP if it does not say."""
        if self._cap is None:
            try:
                r = await self._http.get("/info", headers={"Accept": JSON})
                cap = r.json().get("max_client_batch_size") if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError):
                cap = None
            self._cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else FALLBACK_ITEM_CAP
        return self._cap

    async def _send(
        self, method: str, path: str, headers: dict[str, str], content: bytes | None = None
    ) -> httpx.Response:
        """One request; a server that does not answer is a typed Unreachable error (one line, no chain)."""
        try:
            r = await self._http.request(method, path, content=content, headers=headers)
        except httpx.TransportError as e:
            why = str(e) or type(e).__name__
            raise Unreachable(f"cannot reach a shoal server at {self.url}: {why}") from None
        raise_for_error(r)
        return r

    async def _post(self, path: str, body: EncodeBody | ScoreBody | ExtractBody) -> Decoded:
        media = JSON if self._json else MSGPACK
        content = dumps_json(body) if self._json else packb(body)
        r = await self._send("POST", path, content=content, headers={"Content-Type": media, "Accept": media})
        return decode_body(r.content, r.headers.get("content-type"))

    # the server answers each with its native wire result (docs/API.md), checked here against its type
    async def encode_body(self, model: str, body: EncodeBody) -> EncodeReply:
        path = f"/v1/encode/{model}"
        return checked_reply("encode", await self._post(path, body), f"the server's reply to POST {path}")

    async def score_body(self, model: str, body: ScoreBody) -> ScoreReply:
        path = f"/v1/score/{model}"
        return checked_reply("score", await self._post(path, body), f"the server's reply to POST {path}")

    async def extract_body(self, model: str, body: ExtractBody) -> ExtractReply:
        path = f"/v1/extract/{model}"
        return checked_reply("extract", await self._post(path, body), f"the server's reply to POST {path}")

    async def models(self) -> list[dict[str, Any]]:
        r = await self._send("GET", "/v1/models", headers={"Accept": JSON})
        return r.json()["models"]

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
