"""sie-sdk's SIEClient.extract (its own venv, as the other compatibility tests) against a live `shoal serve`
holding a tiny GLiNER: the same entities the native route gives, ids kept, options passed, errors typed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.wire import packb, unpackb
from tests.compat_support import record, run_client
from tests.extract_support import GLINER_ID, LABELS, gliner_card, texts
from tests.helpers import LiveServer

MP = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


@pytest.fixture(scope="module")
def live(gliner_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    cards = gliner_card(gliner_dirs["span"], tmp_path_factory.mktemp("sie-extract-cards"))
    srv = LiveServer(env={"SHOAL_MODEL_DIR": str(cards)}).wait_ready()
    yield srv
    srv.stop()


def native(srv: LiveServer, items: list[str]) -> list[dict[str, object]]:
    import httpx

    body = {"items": [{"text": t} for t in items], "params": {"labels": LABELS}}
    r = httpx.post(f"{srv.url}/v1/extract/{GLINER_ID}", content=packb(body), headers=MP, timeout=300)
    assert r.status_code == 200, r.text
    items_out: list[dict[str, object]] = unpackb(r.content)["items"]
    return items_out


SIE_EXTRACT = """
import json, sys
from sie_sdk import SIEClient
url, model, texts, labels = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
client = SIEClient(url)
many = client.extract(model, [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)], labels=labels)
one = client.extract(model, {"text": texts[0]}, labels=labels, options={"threshold": 0.6})
out = {"ids": [r.get("id") for r in many], "entities": [[dict(e) for e in r["entities"]] for r in many],
       "one": [dict(e) for e in one["entities"]]}
try:
    client.extract(model, {"text": texts[0]}, labels=[])
except Exception as e:
    out["error"] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""


@pytest.mark.compat
@pytest.mark.slow
def test_sie_sdk_extract_gets_the_engines_entities(live: LiveServer) -> None:
    items = texts(4, seed=9)
    got = run_client("sie", SIE_EXTRACT, live.url, GLINER_ID, json.dumps(items), json.dumps(LABELS))
    assert got["ids"] == ["t0", "t1", "t2", "t3"]
    want = native(live, items)
    assert got["entities"] == [
        [{k: e[k] for k in ("text", "label", "score", "start", "end")} | {"bbox": None} for e in it["entities"]]
        for it in want
    ]
    assert any(got["entities"]) and all(e["score"] >= 0.6 for e in got["one"])
    assert "INVALID_INPUT" in got["error"] or "labels" in got["error"], got["error"]
    record("sie-sdk", "extract (GLiNER entities, ids, options, errors)")
