"""Support for the hardening tests: the table of route families the bad-input suite runs over, raw-socket
clients (idle, slow and hung-up ones), and reading a server process's memory and metrics."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import LiveServer

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SCORER = "tiny-ce"  # a tiny cross-encoder served from a model root (see tests/test_hardening_inputs.py)


def native_code(r: httpx.Response) -> str:
    return str(r.json()["detail"]["code"])


def openai_code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])


def flat_code(r: httpx.Response) -> str:
    """TEI's {error, error_type, code} and Cohere's {message, code}."""
    return str(r.json()["code"])


@dataclass(frozen=True)
class Call:
    """What a case asks of a route: every field is optional; a route builds its body from those it takes."""

    model: str | None = None
    text: str = "hello world"
    n: int = 1
    item_id: str | None = None
    instruction: str | None = None
    dimensions: Any = None
    lora: str | None = None
    labels: list[Any] | None = None


@dataclass(frozen=True)
class Route:
    """One route family's request in its own dialect. `build(call)` gives (path, JSON body); `takes` names
    the Call fields it can carry (a case needing another is skipped for it); `code` reads its error shape."""

    name: str
    build: Callable[[Call], tuple[str, Any]]
    code: Callable[[httpx.Response], str]
    model: str
    takes: frozenset[str] = field(default_factory=frozenset)
    method: str = "POST"


def _items(c: Call) -> list[dict[str, Any]]:
    return [{"text": c.text, **({"id": c.item_id} if c.item_id is not None else {})} for _ in range(c.n)]


def _encode(c: Call) -> tuple[str, Any]:
    params: dict[str, Any] = {}
    if c.instruction is not None:
        params["instruction"] = c.instruction
    options = {k: v for k, v in (("dimensions", c.dimensions), ("lora", c.lora)) if v is not None}
    if options:
        params["options"] = options
    return f"/v1/encode/{c.model}", {"items": _items(c), **({"params": params} if params else {})}


def _score(c: Call) -> tuple[str, Any]:
    body: dict[str, Any] = {"query": {"text": c.text}, "items": _items(c)}
    if c.instruction is not None:
        body["instruction"] = c.instruction
    if c.lora is not None:
        body["options"] = {"lora": c.lora}
    return f"/v1/score/{c.model}", body


def _extract(c: Call) -> tuple[str, Any]:
    params = {"labels": c.labels} if c.labels is not None else {}
    return f"/v1/extract/{c.model}", {"items": _items(c), "params": params}


def _embeddings(path: str) -> Callable[[Call], tuple[str, Any]]:
    def build(c: Call) -> tuple[str, Any]:
        body: dict[str, Any] = {"model": c.model, "input": [c.text] * c.n}
        if c.dimensions is not None:
            body["dimensions"] = c.dimensions
        return path, body

    return build


def _rerank(path: str) -> Callable[[Call], tuple[str, Any]]:
    return lambda c: (path, {"model": c.model, "query": c.text, "documents": [c.text] * c.n})


def _cohere_embed(c: Call, path: str = "/v2/embed") -> tuple[str, Any]:
    body = {"model": c.model, "texts": [c.text] * c.n, "input_type": "search_document", "embedding_types": ["float"]}
    return path, body


def _tei(path: str) -> Callable[[Call], tuple[str, Any]]:
    return lambda c: (path, {"model": c.model, "inputs": [c.text] * c.n})


def _tei_rerank(c: Call) -> tuple[str, Any]:
    return "/rerank", {"model": c.model, "query": c.text, "texts": [c.text] * c.n}


def _tei_predict(c: Call) -> tuple[str, Any]:
    return "/predict", {"model": c.model, "inputs": [[c.text, c.text]] * c.n}


def _tei_similarity(c: Call) -> tuple[str, Any]:
    return "/", {"model": c.model, "inputs": {"source_sentence": c.text, "sentences": [c.text] * c.n}}


def _tool_embed(c: Call) -> tuple[str, Any]:
    return "/v1/tools/embed", {"texts": [c.text] * c.n, "model": c.model}


def _model_detail(c: Call) -> tuple[str, Any]:
    return f"/v1/models/{c.model}", None


# "required_model": an empty model id is an error there; "item_cap": SHOAL_MAX_ITEMS bounds its list
ITEMS = frozenset({"text", "n", "required_model", "item_cap"})
# Every route family, one line each: a new family (Cohere v2, TEI, ...) is one more entry.
ROUTES = [
    Route("native encode", _encode, native_code, MINILM, ITEMS | {"item_id", "instruction", "dimensions", "lora"}),
    Route("native score", _score, native_code, SCORER, ITEMS | {"item_id", "instruction", "lora"}),
    Route("native extract", _extract, native_code, MINILM, frozenset({"n", "labels", "required_model", "item_cap"})),
    Route("native model detail", _model_detail, native_code, MINILM, frozenset({"required_model"}), method="GET"),
    Route("openai embeddings", _embeddings("/v1/embeddings"), openai_code, MINILM, ITEMS | {"dimensions"}),
    # Infinity's path: `dimensions: 0` means "not set" there (infinity_client sends it), so no dimensions cases
    Route("openai embeddings, no /v1", _embeddings("/embeddings"), openai_code, MINILM, ITEMS),
    Route("infinity embeddings", _embeddings("/infinity/embeddings"), openai_code, MINILM, ITEMS),
    Route("rerank", _rerank("/v1/rerank"), openai_code, SCORER, ITEMS),
    Route("infinity rerank", _rerank("/infinity/rerank"), openai_code, SCORER, ITEMS),
    Route("cohere v2 embed", _cohere_embed, flat_code, MINILM, ITEMS),
    # v1 serves the server's default model when the body names none, so no "required_model" case
    Route("cohere v1 embed", lambda c: _cohere_embed(c, "/v1/embed"), flat_code, MINILM, ITEMS - {"required_model"}),
    Route("cohere v2 rerank", _rerank("/v2/rerank"), flat_code, SCORER, ITEMS),
    Route("tei embed", _tei("/embed"), flat_code, MINILM, ITEMS),
    Route("tei embed_sparse", _tei("/embed_sparse"), flat_code, MINILM, ITEMS),
    Route("tei tokenize", _tei("/tokenize"), flat_code, MINILM, ITEMS),
    Route("tei rerank", _tei_rerank, flat_code, SCORER, ITEMS),
    Route("tei predict", _tei_predict, flat_code, SCORER, ITEMS),
    Route("tei root (similarity)", _tei_similarity, flat_code, MINILM, ITEMS),
    # no model: the server's default; its list is bounded by SHOAL_TOOLS_MAX_TEXTS (the engine gets chunks)
    Route("tools embed", _tool_embed, native_code, MINILM, frozenset({"text", "n"})),
]


def send(server: LiveServer, route: Route, call: Call, raw: bytes | None = None, **kw: Any) -> httpx.Response:
    """The route's request for `call` (or `raw` bytes in its place), as JSON."""
    call = call if call.model is not None else Call(**{**call.__dict__, "model": route.model})
    path, body = route.build(call)
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    content = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    return httpx.request(route.method, server.url + path, content=content, headers=headers, timeout=120, **kw)


def healthy(server: LiveServer) -> bool:
    """Alive, /healthz answers, and a good encode still gets its vector."""
    if not server.alive() or httpx.get(f"{server.url}/healthz", timeout=30).status_code != 200:
        return False
    r = httpx.post(f"{server.url}/v1/encode/{MINILM}", json={"items": [{"text": "still fine"}]}, timeout=120)
    return r.status_code == 200 and len(r.json()["items"][0]["dense"]["values"]) == 384


# -- processes and raw sockets ----------------------------------------------------------------------


def reset_peak(pid: int) -> None:
    """Start a fresh peak: VmHWM drops to the current RSS (Linux: write 5 to /proc/PID/clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss(pid: int) -> int:
    """A process's peak resident memory in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def samples(server_url: str, metric: str) -> dict[str, float]:
    """Every sample line of one metric: label text -> value."""
    out = {}
    for line in httpx.get(f"{server_url}/metrics", timeout=30).text.splitlines():
        if line.startswith(metric + "{"):
            labels, value = line[len(metric) :].rsplit(" ", 1)
            out[labels] = float(value)
    return out


def label_values(server_url: str, metric: str, label: str) -> set[str]:
    values = set()
    for labels in samples(server_url, metric):
        for part in labels.strip("{}").split(","):
            name, _, value = part.partition("=")
            if name == label:
                values.add(value.strip('"'))
    return values


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_reply(s: socket.socket, timeout: float = 60) -> bytes:
    """Everything the server sends until it closes the connection (or `timeout` passes)."""
    s.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server has closed this connection (EOF or reset), without waiting."""
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) == b""  # peek: an answer waiting to be read is left in place
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def trickle(s: socket.socket, pieces: Iterable[bytes]) -> bytes:
    """Send each piece 100 ms apart until the server closes the connection; then its reply. Closes `s`."""
    try:
        for piece in pieces:
            try:
                s.sendall(piece)
            except OSError:
                break
            if closed_by_server(s):
                break
            time.sleep(0.1)
        return read_reply(s)
    finally:
        s.close()


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
