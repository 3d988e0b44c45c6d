"""Pieces of bench/roofline.py: the matmul peak per precision, the HTTP clients, stage timers, the plot."""

from __future__ import annotations

import asyncio
import http.client
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import torch
from torch import nn

from engine.arch.flops import linear_shapes
from engine.arch.linear import FusedLinear
from engine.model.precision import DTYPES
from engine.model.quantize import Int8Linear
from engine.wire import packb, unpackb

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


# -- the roofline: dense matmul throughput with the model's shapes ------------------------------------------


class MatmulPeak:
    """The linear layers of one transformer layer of the model (q, k, v, out, up, down) in one precision, run
    back to back on `tokens` rows, on each kernel `device` offers for them (on a CPU PyTorch's addmm and
    oneDNN's linear, engine/arch/linear.py; elsewhere PyTorch's): the best FLOP/s over every call of `measure`
    is the roofline."""

    def __init__(self, config: Any, precision: str, tokens: int, device: str = "cpu") -> None:
        self.precision, self.device = precision, device
        dtype = DTYPES[precision]
        g = torch.Generator().manual_seed(0)
        self.kernels: list[list[nn.Module]] = [[], []]  # addmm, oneDNN (the same weights; CPU only)
        self.inputs: dict[int, torch.Tensor] = {}
        self.flops = 0
        for n_in, n_out in linear_shapes(config):
            layer = FusedLinear(n_in, n_out)
            with torch.no_grad():
                layer.weight.copy_(torch.randn(n_out, n_in, generator=g) * n_in**-0.5)
            if precision == "int8":
                self.kernels[0].append(Int8Linear(layer))
            else:
                plain = nn.Linear(n_in, n_out).to(device, dtype).eval()
                plain.load_state_dict(layer.state_dict())
                self.kernels[0].append(plain)
                if device == "cpu":
                    self.kernels[1].append(layer.to(dtype).eval())
            self.inputs.setdefault(n_in, torch.randn(tokens, n_in, generator=g).to(device, dtype))
            self.flops += 2 * tokens * n_in * n_out
        self.best = 0.0

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    @torch.inference_mode()
    def measure(self, passes: int = 4) -> float:
        """FLOP/s of the best of `passes` passes per kernel (after one warm-up); keeps the best seen so far."""
        for layers in (k for k in self.kernels if k):
            for i in range(passes + 1):
                self._sync()
                started = time.perf_counter()
                for layer in layers:
                    layer(self.inputs[layer.in_features])  # type: ignore[index]
                self._sync()
                if i:
                    self.best = max(self.best, self.flops / (time.perf_counter() - started))
        return self.best


# -- engine timers ------------------------------------------------------------------------------------------


def stage_seconds_local() -> dict[str, float]:
    from prometheus_client import REGISTRY

    from engine.metrics import STAGES

    return {s: REGISTRY.get_sample_value("shoal_stage_seconds_total", {"stage": s}) or 0.0 for s in STAGES}


def stage_seconds_remote(url: str) -> dict[str, float]:
    from engine.metrics import STAGES

    seconds = dict.fromkeys(STAGES, 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("shoal_stage_seconds_total{"):
            seconds[line.split('stage="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return seconds


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


# -- HTTP ---------------------------------------------------------------------------------------------------


class HttpClients:
    """`clients` concurrent HTTP clients (msgpack) on connections kept open between passes, as a real client's
    are: each pass times the requests, not the making of an event loop, an SSL context and connections
    (about 20 ms a pass here, while the server sits idle)."""

    def __init__(self, url: str, clients: int = 4, batch: int = 32) -> None:
        self.clients, self.batch = clients, batch
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            base_url=url, timeout=600, limits=httpx.Limits(max_keepalive_connections=clients)
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        """Encode `texts` in batches of `batch`, `clients` requests in flight at once."""
        return self.loop.run_until_complete(self._pass(texts))

    async def _pass(self, texts: list[str]) -> np.ndarray:
        chunks = [texts[i : i + self.batch] for i in range(0, len(texts), self.batch)]
        out: list[np.ndarray | None] = [None] * len(chunks)
        todo = iter(range(len(chunks)))

        async def client_loop() -> None:
            for k in todo:
                body = packb({"items": [{"text": t} for t in chunks[k]]})
                headers = {"Content-Type": "application/msgpack"}
                r = await self.client.post(f"/v1/encode/{MODEL}", content=body, headers=headers)
                r.raise_for_status()
                out[k] = np.stack([item["dense"]["values"] for item in unpackb(r.content)["items"]])

        await asyncio.gather(*(client_loop() for _ in range(self.clients)))
        return np.concatenate(out)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def one_sentence_latency(url: str, sentence: str, n: int = 100) -> dict[str, float]:
    """Sequential one-sentence requests on a kept-alive connection: p50 of wall time, of the engine's inference
    time (X-Inference-Time), and of their difference per request (the serving overhead). The client is the
    standard library's, the leanest there is, so that the overhead measured is the server's, not the client's
    (httpx adds about 0.6 ms a request on this class of machine)."""
    body = packb({"items": [{"text": sentence}]})
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    walls, inference, overhead = [], [], []
    try:
        for i in range(n + 10):
            started = time.perf_counter()
            conn.request("POST", f"/v1/encode/{MODEL}", body, {"Content-Type": "application/msgpack"})
            r = conn.getresponse()
            data = r.read()
            wall = (time.perf_counter() - started) * 1000
            if r.status != 200:
                raise RuntimeError(f"one-sentence request answered {r.status}: {data[:200]!r}")
            unpackb(data)
            if i >= 10:  # warm-up first
                infer = float(r.getheader("X-Inference-Time") or "nan")
                walls.append(wall)
                inference.append(infer)
                overhead.append(wall - infer)
    finally:
        conn.close()
    return {
        "p50_ms": statistics.median(walls),
        "inference_p50_ms": statistics.median(inference),
        "overhead_p50_ms": statistics.median(overhead),
        "overhead_p90_ms": float(np.percentile(overhead, 90)),
    }


# -- the plot -----------------------------------------------------------------------------------------------


def plot(rows: list[dict[str, Any]], roofs: dict[str, float], path: Path, title: str) -> None:
    """Bars: passages/s per system and precision; dashed lines: the passages/s each precision's matmul peak
    allows (every useful FLOP at peak)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"float32": "#4c72b0", "int8": "#dd8452", "bfloat16": "#55a868", "float16": "#c44e52"}
    fig, ax = plt.subplots(figsize=(max(9.0, 1.15 * len(rows)), 4.8), dpi=110)
    labels = [f"{r['system']}\n{r['precision']}" for r in rows]
    values = [r["passages_per_s"] for r in rows]
    bars = ax.bar(labels, values, color=[colours.get(r["precision"], "#8172b2") for r in rows])
    for bar, r in zip(bars, rows, strict=True):
        share = r["fraction_of_peak"]
        note = f"{r['passages_per_s']:.3g}/s" + (f"\n{share * 100:.0f}% of peak" if share is not None else "")
        ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    for precision, roof in roofs.items():
        ax.axhline(roof, ls="--", lw=1.2, color=colours.get(precision, "grey"))
        ax.annotate(f"{precision} matmul roofline {roof:.3g}/s", (-0.45, roof), ha="left", va="bottom", fontsize=8)
    ax.set_ylabel("passages / s")
    ax.set_ylim(0, max([*values, *roofs.values()]) * 1.25)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
