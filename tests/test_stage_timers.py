"""The engine's own stage timers (shoal_stage_seconds_total{stage}): one real HTTP encode moves every stage."""

from __future__ import annotations

import httpx

from engine.metrics import STAGES
from engine.wire import packb
from tests.conftest import MINILM
from tests.helpers import LiveServer


def stage_seconds(server: LiveServer) -> dict[str, float]:
    seconds = dict.fromkeys(STAGES, 0.0)
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("shoal_stage_seconds_total{"):
            stage = line.split('stage="', 1)[1].split('"', 1)[0]
            seconds[stage] = float(line.rsplit(" ", 1)[1])
    return seconds


def test_one_request_moves_every_stage(server: LiveServer) -> None:
    before = stage_seconds(server)
    body = packb({"items": [{"text": f"passage number {i} about engines"} for i in range(8)]})
    r = httpx.post(f"{server.url}/v1/encode/{MINILM}", content=body,
                   headers={"Content-Type": "application/msgpack"}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    after = stage_seconds(server)
    assert set(after) == set(STAGES)
    grew = [stage for stage in STAGES if after[stage] > before[stage]]
    assert grew == list(STAGES), (before, after)
