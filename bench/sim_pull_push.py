"""DISCRETE-EVENT SIMULATION (not a measurement): pull-based workers vs a push router with stale snapshots.

Model: N workers; Poisson arrivals of small requests (tokens ~ lognormal, sigma 1, given mean); a worker
serves a batch of queued requests (FIFO, up to a token budget) in `fixed_ms + tokens * per_token_us`.
- pull: one shared queue; an idle worker pulls (paying one broker round trip, `hop_ms`) and batches
  whatever is there.
- push: a router assigns each arrival on arrival to one worker's local queue (arriving `hop_ms` later):
  `jsq-snapshot` picks the worker with the least outstanding tokens in a snapshot refreshed every T ms
  (it does not see its own assignments until the next refresh); `round-robin` ignores load.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field


@dataclass
class SimConfig:
    workers: int = 8
    mean_tokens: float = 32.0
    fixed_ms: float = 2.0  # per forward pass: kernel launches, Python, pooling
    per_token_us: float = 20.0
    budget_tokens: int = 4096
    hop_ms: float = 0.5
    load: float = 0.8  # offered load as a fraction of the capacity at `ref_batch` requests per forward pass
    ref_batch: int = 8
    sigma: float = 1.0  # lognormal spread of request sizes (a few requests are many times the mean)
    requests: int = 20_000
    seed: int = 0

    def rate_rps(self) -> float:
        """Offered requests/s: `load` of what the cluster serves when each forward pass holds `ref_batch`."""
        service_s = (self.fixed_ms + self.ref_batch * self.mean_tokens * self.per_token_us / 1000) / 1000
        return self.load * self.workers * self.ref_batch / service_s


@dataclass
class Result:
    policy: str
    refresh_ms: float | None
    utilisation: float
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    mean_batch: float


@dataclass(order=True)
class _Event:
    t: float
    seq: int
    kind: str = field(compare=False)
    arg: int = field(compare=False, default=0)


def simulate(cfg: SimConfig, policy: str, refresh_ms: float = 10.0) -> Result:
    """Run one policy ('pull', 'jsq-snapshot', 'round-robin') over the same seeded arrival stream."""
    rng = random.Random(cfg.seed)
    rate = cfg.rate_rps()
    mu = math.log(cfg.mean_tokens) - cfg.sigma**2 / 2  # lognormal with the configured mean
    arrivals, t = [], 0.0
    for _ in range(cfg.requests):
        t += rng.expovariate(rate)
        arrivals.append((t, min(cfg.budget_tokens, max(1, round(rng.lognormvariate(mu, cfg.sigma))))))
    tokens = [a[1] for a in arrivals]
    events: list[_Event] = []
    seq = 0

    def push_event(at: float, kind: str, arg: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, _Event(at, seq, kind, arg))

    for i, (at, _) in enumerate(arrivals):
        push_event(at, "arrive", i)
    n = cfg.workers
    shared: deque[int] = deque()
    local: list[deque[int]] = [deque() for _ in range(n)]
    outstanding = [0] * n  # tokens queued or in service per worker (the truth)
    snapshot = [0] * n
    busy = [False] * n
    busy_s = [0.0] * n
    done_at: dict[int, float] = {}
    batches: list[int] = []
    rr = 0
    if policy == "jsq-snapshot":
        push_event(0.0, "snapshot")

    def start(w: int, now: float) -> None:
        queue = shared if policy == "pull" else local[w]
        if busy[w] or not queue:
            return
        taken, tok = [], 0
        while queue and (not taken or tok + tokens[queue[0]] <= cfg.budget_tokens):
            i = queue.popleft()
            taken.append(i)
            tok += tokens[i]
        pull_cost = cfg.hop_ms / 1000 if policy == "pull" else 0.0
        service = (cfg.fixed_ms + tok * cfg.per_token_us / 1000) / 1000
        busy[w] = True
        busy_s[w] += service
        batches.append(len(taken))
        push_event(now + pull_cost + service, "done", w)
        in_service[w] = taken

    in_service: list[list[int]] = [[] for _ in range(n)]
    end = 0.0
    while events:
        ev = heapq.heappop(events)
        now = ev.t
        if ev.kind == "arrive":
            i = ev.arg
            if policy == "pull":
                shared.append(i)
                for w in range(n):
                    if not busy[w]:
                        start(w, now)
                        break
            else:
                if policy == "round-robin":
                    w, rr = rr, (rr + 1) % n
                else:
                    w = min(range(n), key=lambda k: snapshot[k])
                outstanding[w] += tokens[i]
                push_event(now + cfg.hop_ms / 1000, "land", i * n + w)
        elif ev.kind == "land":
            i, w = divmod(ev.arg, n)
            local[w].append(i)
            start(w, now)
        elif ev.kind == "done":
            w = ev.arg
            for i in in_service[w]:
                done_at[i] = now
                outstanding[w] -= tokens[i] if policy != "pull" else 0
            busy[w] = False
            end = max(end, now)
            start(w, now)
            if policy == "pull" and shared:
                for k in range(n):
                    start(k, now)
        elif ev.kind == "snapshot":
            snapshot = list(outstanding)
            if len(done_at) < cfg.requests:
                push_event(now + refresh_ms / 1000, "snapshot")
    lat = sorted((done_at[i] - arrivals[i][0]) * 1000 for i in range(cfg.requests))
    span = end - arrivals[0][0]
    return Result(
        policy=policy,
        refresh_ms=refresh_ms if policy == "jsq-snapshot" else None,
        utilisation=sum(busy_s) / (n * span),
        throughput_rps=cfg.requests / span,
        p50_ms=lat[len(lat) // 2],
        p99_ms=lat[int(len(lat) * 0.99)],
        mean_batch=sum(batches) / len(batches),
    )
