"""Prometheus metrics of the gateway and workers (one process-wide registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("shoal_requests_total", "Requests answered", ["endpoint", "model", "code"])
LATENCY = Histogram(
    "shoal_request_seconds",
    "Request latency, gateway in to response out",
    ["endpoint", "model"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BATCH_TOKENS = Histogram(
    "shoal_batch_tokens",
    "Real tokens in one forward batch",
    ["model"],
    buckets=(64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
)
ITEMS = Counter("shoal_items_total", "Items run through a model", ["model", "task"])
TOKENS = Counter("shoal_tokens_total", "Tokens run through a model", ["model"])
QUEUE_DEPTH = Gauge("shoal_queue_depth", "Tasks waiting in the queue")
QUEUE_WAIT = Histogram("shoal_queue_wait_seconds", "Time a task waited before a worker pulled it", ["model"])
MODEL_LOADS = Counter("shoal_model_loads_total", "Model loads", ["model", "outcome"])
