"""GET /v1/status: health, models and their residency tier, the queue, request totals and recent rates.

What `shoal status` and the web console show. Rates come from a short window of earlier answers (at most
WINDOW samples, one a second at most), so nothing grows with uptime or with the number of callers.
"""

from __future__ import annotations

import time
from collections import deque

from fastapi import APIRouter, Request
from prometheus_client.metrics import MetricWrapperBase

from engine.catalogue.weights import WeightsStatus, weights_status
from engine.http.redact import Scrub, scrubber
from engine.http.replies import RouteFamily, engine_of
from engine.metrics import ITEMS, QUEUE_DEAD, QUEUE_HELD, REQUESTS, TOKENS
from engine.tasks.results import JSONObject, JSONValue

router = APIRouter()
TIERS = ("device", "host", "disk")
WINDOW = 64
RATE_SPAN_S = 60.0
VERSION = "0.1.0"


def metric_total(metric: MetricWrapperBase, where: dict[str, str] | None = None) -> float:
    """The sum of a counter's or gauge's samples (optionally only those whose labels start as `where` says)."""
    total = 0.0
    for family in metric.collect():
        for s in family.samples:
            if s.name.endswith(("_created",)):
                continue
            if where and not all(str(s.labels.get(k, "")).startswith(v) for k, v in where.items()):
                continue
            total += s.value
    return total


def totals() -> dict[str, float]:
    """Process totals since start: requests answered (and how many were errors), items and tokens run."""
    return {
        "requests": metric_total(REQUESTS),
        "errors": metric_total(REQUESTS, {"code": "4"}) + metric_total(REQUESTS, {"code": "5"}),
        "items": metric_total(ITEMS),
        "tokens": metric_total(TOKENS),
    }


def rates(samples: deque[tuple[float, dict[str, float]]], now: float, current: dict[str, float]) -> JSONObject:
    """Per-second rates over the window's oldest sample in the last RATE_SPAN_S, or None before there is one."""
    if not samples or now - samples[-1][0] >= 1.0:
        samples.append((now, current))
    base = next(((t, v) for t, v in samples if now - t <= RATE_SPAN_S and now - t >= 0.5), None)
    if base is None:
        return {"window_s": None, **{k: None for k in current}}
    dt = now - base[0]
    return {"window_s": round(dt, 1), **{k: round((current[k] - base[1][k]) / dt, 3) for k in current}}


def weights_of(weights: WeightsStatus, scrub: Scrub) -> JSONObject:
    """Where a model's weights are (weights_status), with no server paths when local folders are off."""
    location = scrub(weights.location) if weights.location is not None else None
    tried: list[JSONValue] = [scrub(t) for t in weights.tried]
    return {"available": weights.available, "source": weights.source, "location": location, "tried": tried}


@router.get("/v1/status", response_model=None)  # the annotation types the body; FastAPI need not re-validate it
async def status(request: Request) -> JSONObject:
    """Health, models (tier, weights), residency budgets, queue and throughput of this process."""
    engine = engine_of(request)
    reg = engine.registry
    state = "ready" if engine.ready and not engine.draining else ("draining" if engine.draining else "starting")
    models: list[JSONValue] = []
    in_tier = dict.fromkeys(TIERS, 0)
    scrub = scrubber(engine.settings)  # a server (local folders off) shows no paths of its own
    for card in engine.catalogue.known():
        tier = reg.tier(card.id)
        in_tier[tier] = in_tier.get(tier, 0) + 1
        models.append(
            {
                "name": card.id,
                "tasks": [*card.tasks],
                "outputs": [*card.outputs],
                "tier": tier,
                "loaded": reg.is_loaded(card.id),
                "pinned": card.id in reg.pinned_models(),
                "weights": weights_of(weights_status(card, engine.settings.offline), scrub),
            }
        )
    tiers: JSONObject = {
        t: {"models": in_tier[t], "bytes": reg.used(t) if t != "disk" else 0,
            "budget": reg.budget.get(t)}
        for t in TIERS
    }  # fmt: skip
    pending = await engine.queue.depth() if engine.queue is not None else 0
    current = totals()
    samples: deque[tuple[float, dict[str, float]]] = getattr(request.app.state, "status_samples", None) or deque(
        maxlen=WINDOW
    )
    request.app.state.status_samples = samples
    now = time.monotonic()
    return {
        "status": state,
        "version": VERSION,
        "mode": "gateway" if engine.settings.queue_url and engine.worker is None else "embedded",
        "device": engine.settings.device,
        "auth": bool(engine.settings.api_key),
        "models": models,
        "tiers": tiers,
        "queue": {
            "kind": "nats" if engine.settings.queue_url else "in-process",
            "pending": pending,
            "held": metric_total(QUEUE_HELD),
            "dead_letters": metric_total(QUEUE_DEAD),
        },
        "totals": {**current},
        "rates": rates(samples, now, current),
    }


FAMILY = RouteFamily(router)
