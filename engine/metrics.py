"""Prometheus metrics of the gateway and workers (one process-wide registry)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

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
# distributed mode (engine/nats_queue.py)
QUEUE_PULLED = Counter("shoal_queue_pulled_total", "Tasks a worker pulled from the queue", ["model"])
QUEUE_PULL_BATCH = Histogram(
    "shoal_queue_pull_batch_size", "Tasks returned by one pull", buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)
)
QUEUE_REDELIVERED = Counter("shoal_queue_redeliveries_total", "Tasks pulled again after an earlier delivery", ["model"])
QUEUE_DEAD = Counter("shoal_queue_dead_letters_total", "Tasks moved to the dead-letter stream", ["model"])
QUEUE_EXPIRED = Counter("shoal_queue_expired_total", "Tasks dropped unrun because their deadline passed", ["model"])
QUEUE_DUPLICATES = Counter("shoal_queue_duplicate_results_total", "Results ignored because the request was answered")
QUEUE_REPUBLISHED = Counter(
    "shoal_queue_republished_total", "Waiting tasks the gateway published again after reconnecting to the queue"
)
QUEUE_HELD = Gauge("shoal_queue_held", "Tasks this worker pulled and has not settled yet")
QUEUE_PENDING = Gauge("shoal_queue_pending", "Tasks pending in a queue stream (for autoscaling)", ["stream"])

# residency (engine/residency.py) and LoRA adapters (engine/lora.py)
RESIDENT_MODELS = Gauge("shoal_resident_models", "Models held per tier", ["tier"])
TIER_BYTES = Gauge("shoal_tier_bytes", "Bytes of models held per tier (device counts the activation reserve)", ["tier"])
EVICTIONS = Counter("shoal_evictions_total", "Models moved down a tier", ["model", "from_tier", "to_tier"])
LOAD_SECONDS = Histogram(
    "shoal_model_load_seconds",
    "Time to bring a model onto the device, by where it came from (disk or host)",
    ["source"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
LORA_CACHE = Counter("shoal_lora_cache_total", "LoRA adapter look-ups", ["result"])
OOM_RECOVERIES = Counter("shoal_oom_recoveries_total", "Out-of-memory errors and how they ended", ["action"])
ISOLATED = Counter(
    "shoal_batch_isolations_total",
    "Shared batches that failed as a whole and were split to find the culprit",
    ["model"],
)

# operations (deploy/: Grafana dashboards, Prometheus alerts)
WORKER_UP = Gauge("shoal_worker_up", "1 while this process runs a worker loop (set by engine/cluster.py)")
MODEL_PENDING = Gauge(
    "shoal_queue_model_pending",
    "Tasks pending in the work stream per model (gateway, beside shoal_queue_pending)",
    ["model"],
)
BATCH_FILL = Histogram(
    "shoal_batch_fill_ratio",
    "Real tokens of one forward batch over its token budget",
    ["model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0),
)
COMPUTED_TOKENS = Counter(
    "shoal_batch_computed_tokens_total",
    "Token positions computed by forward batches, padding included (packed batches: equal to the real tokens)",
    ["model"],
)

# where a request's time goes, from the engine's own timers (bench/roofline.py reads them)
STAGES = ("decode", "tokenize", "batch", "forward", "postprocess", "serialise")
STAGE_SECONDS = Counter(
    "shoal_stage_seconds_total",
    "Seconds spent per stage: decode (request body), tokenize, batch (packing), forward (backbone), "
    "postprocess (heads, pooling, output shaping), serialise (response body)",
    ["stage"],
)


@contextmanager
def timed(stage: str) -> Iterator[None]:
    """Add the block's wall time to shoal_stage_seconds_total{stage} (one counter update per block: use it
    around batches and requests, never per token)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        STAGE_SECONDS.labels(stage).inc(time.perf_counter() - started)
