"""The vector-store backends available in a test run, as store URLs; a real `chroma run` server for HTTP.

Every backend here is a real engine: LanceDB embedded, Qdrant Edge (Qdrant's engine in-process), Chroma PersistentClient, a
Chroma server started on a free loopback port (stopped by PID), and Weaviate when WEAVIATE_URL is set.
No package registry here ships a Qdrant server binary, so `qdrant-server` runs only when QDRANT_URL is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import free_port, stop_process

BACKENDS = ["lancedb", "qdrant-edge", "qdrant-server", "chroma-local", "chroma-http", "weaviate"]
SERVER_BACKENDS = {"qdrant-server", "chroma-http", "weaviate"}


class ChromaServer:
    """`chroma run` on a free loopback port with its own data folder; stopped by PID."""

    def __init__(self, data: Path) -> None:
        exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
        if exe is None:
            pytest.skip("the chroma CLI (pip install chromadb) is not installed")
        self.port = free_port()
        self.log = open(data.parent / f"chroma-{self.port}.log", "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        cmd = [exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = f"chroma://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> ChromaServer:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chroma run exited with {self.proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError("chroma run did not answer its heartbeat")

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data").wait_ready()
    yield server
    server.stop()


def unique(prefix: str = "coll") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest, collection: str) -> str:
    """A fresh store (or a fresh collection in a shared server) for one test; skips what is unavailable."""
    if backend == "lancedb":
        return f"lancedb://{tmp_path / 'lance'}"
    if backend == "qdrant-edge":
        return f"qdrant+edge://{tmp_path / 'qdrant'}"
    if backend == "chroma-local":
        return f"chroma+local://{tmp_path / 'chroma'}"
    if backend == "chroma-http":
        server = request.getfixturevalue("chroma_server")
        return f"{server.url}/{collection}"
    if backend == "qdrant-server":
        base = os.environ.get("QDRANT_URL")
        if not base:
            pytest.skip("no Qdrant server: no package registry here ships one; set QDRANT_URL=http://HOST:PORT")
        u = urlsplit(base)
        return f"qdrant://{u.hostname}:{u.port or 6333}/{collection}"
    if backend == "weaviate":
        base = os.environ.get("WEAVIATE_URL")
        if not base:
            pytest.skip("no Weaviate server can run here; set WEAVIATE_URL=http://HOST:PORT to run against one")
        u = urlsplit(base)
        return f"weaviate://{u.hostname}:{u.port or 8080}/{collection[:1].upper() + collection[1:]}"
    raise ValueError(backend)
