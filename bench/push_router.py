"""A round-robin push router over `shoal serve` backends: the central-router baseline for bench/pull_vs_push.py."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request, Response

HOP_HEADERS = ("content-type", "retry-after", "x-queue-time", "x-inference-time", "x-tokenization-time")


def create_router(backends: list[str]) -> FastAPI:
    """Forwards each POST /v1/* to the next backend in turn; it knows nothing of the backends' load."""
    state: dict[str, httpx.AsyncClient] = {}
    turn = itertools.cycle(range(len(backends)))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        state["http"] = httpx.AsyncClient(timeout=300, limits=limits)
        yield
        await state["http"].aclose()

    app = FastAPI(title="shoal push router (benchmark baseline)", lifespan=lifespan)

    @app.post("/v1/{path:path}")
    async def forward(path: str, request: Request) -> Response:
        backend = backends[next(turn)]
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        r = await state["http"].post(f"{backend}/v1/{path}", content=await request.body(), headers=headers)
        out = {k: v for k, v in r.headers.items() if k.lower() in HOP_HEADERS}
        return Response(r.content, status_code=r.status_code, headers=out)

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--backend", action="append", required=True, help="a shoal serve URL (repeatable)")
    args = parser.parse_args()
    uvicorn.run(create_router(args.backend), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
