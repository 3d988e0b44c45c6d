"""The web console at / (static files, no CDN), GET /v1/status, offline /docs, request bodies in openapi.json,
and the console in a real browser: headless Chromium from Debian driven by Playwright, against a live server
with an API key: no data until the key is given, then an encode from the playground, seen and screenshotted;
a score in the playground ranked as the API ranks it, and a search of the store `shoal serve --db` names."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.build import build_app
from engine.config import EngineSettings
from engine.http.console import FILES
from tests.helpers import LiveServer

KEY = "console-test-key"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """The gateway's app in-process, with an API key (no model is loaded by these requests)."""
    app = build_app(EngineSettings(api_key=KEY))
    with TestClient(app) as c:
        yield c


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def test_console_is_served_without_a_key_and_holds_no_data(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for name in FILES:
        r = client.get(f"/console/{name}")
        assert r.status_code == 200, name
        assert not re.search(r"(src|href)=\"https?://", r.text), f"{name} loads something from the network"
        assert "sentence-transformers" not in r.text or name.endswith(".js"), "no data baked into the page"
    for outside in ("/console/%2e%2e/__init__.py", "/console/nosuch.js", "/console/pages/%2e%2e/%2e%2e/docs.py"):
        assert client.get(outside).status_code == 404, outside
    assert client.get("/v1/models").status_code == 401 and client.get("/v1/status").status_code == 401
    assert client.post("/", json={"inputs": "x"}).status_code == 401, "only GET / (the page) is open, not TEI's POST /"


def test_status_reports_models_tiers_queue_and_rates(client: TestClient) -> None:
    s = client.get("/v1/status", headers=auth()).json()
    assert s["status"] == "ready" and s["mode"] == "embedded" and s["auth"] is True
    assert set(s["tiers"]) == {"device", "host", "disk"} and s["tiers"]["device"]["budget"] > 0
    assert set(s["queue"]) == {"kind", "pending", "held", "dead_letters"} and s["queue"]["kind"] == "in-process"
    minilm = next(m for m in s["models"] if m["name"] == "sentence-transformers/all-MiniLM-L6-v2")
    assert minilm["weights"]["source"] == "package" and minilm["tier"] in ("disk", "device", "host")
    assert {"requests", "errors", "items", "tokens"} <= set(s["totals"])
    assert s["rates"]["window_s"] is None or s["rates"]["window_s"] > 0


def test_every_post_route_documents_its_body(client: TestClient) -> None:
    spec = client.get("/openapi.json", headers=auth()).json()
    posts = {p: ops["post"] for p, ops in spec["paths"].items() if "post" in ops}
    assert {"/v1/encode/{model}", "/v1/score/{model}", "/v1/embeddings", "/v1/rerank"} <= set(posts)
    for path, op in posts.items():
        schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        assert schema and (schema.get("properties") or schema.get("oneOf")), f"POST {path} has no body schema"
        assert "$defs" not in str(schema), f"POST {path}: unresolved references"
    encode = posts["/v1/encode/{model}"]["requestBody"]["content"]["application/json"]["schema"]
    assert "items" in encode["properties"] and "params" in encode["properties"]


def test_docs_work_offline(client: TestClient) -> None:
    for path in ("/docs", "/redoc"):
        html = client.get(path, headers=auth()).text
        urls = re.findall(r"(?:src|href)=[\"']([^\"']+)[\"']", html)
        assert urls and all(u.startswith(("/docs/assets/", "/openapi.json")) for u in urls), urls
        for u in urls:
            if u.startswith("/docs/assets/"):
                assert client.get(u, headers=auth()).status_code == 200, u
    assert "cdn" not in client.get("/docs", headers=auth()).text.lower()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium: apt-get install chromium (scripts/setup.sh does as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def live(browser: object) -> Iterator[LiveServer]:
    server = LiveServer(env={"SHOAL_API_KEY": KEY}).wait_ready()
    yield server
    server.stop()


@pytest.mark.slow
def test_console_in_a_real_browser(browser: object, live: LiveServer, tmp_path: Path) -> None:
    server = live
    page = browser.new_page(viewport={"width": 1200, "height": 900})  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.url + "/")
    page.wait_for_selector("#key-dialog[open]")
    assert "all-MiniLM" not in page.inner_text("body"), "no data is shown without the key"
    page.screenshot(path=str(tmp_path / "console-key.png"))
    page.fill("#key-input", "wrong")
    page.click("#key-form button")
    page.wait_for_selector("#key-error:not([hidden])")
    assert "refused" in page.inner_text("#key-error")
    page.fill("#key-input", KEY)
    page.click("#key-form button")
    page.wait_for_selector("#models table")
    assert "sentence-transformers/all-MiniLM-L6-v2" in page.inner_text("#models")
    page.screenshot(path=str(tmp_path / "console-overview.png"), full_page=True)
    page.click("nav a[href='#/playground']")
    assert page.locator("#tab-extract").count() == 1, "MiniLM classifies zero-shot (task extract): an Extract tab"
    assert page.locator("nav a[href='#/search']").count() == 0, "no --db: no Search page"
    page.fill("#encode-texts", "a cat sits on the mat\na kitten rests on a rug\nstock markets fell today")
    page.click("#encode-run")
    page.wait_for_selector("#encode-result table.sim", timeout=180_000)
    result = page.inner_text("#encode-result")
    assert "3 vectors of 384 dims" in result and "1.000" in result
    cells = [float(x) for x in re.findall(r"\d\.\d{3}", page.inner_text("#encode-result table.sim"))]
    sim = [cells[i * 3 : i * 3 + 3] for i in range(3)]
    assert sim[0][1] > sim[0][2] and sim[1][0] > sim[1][2], f"cats are closer to kittens than to stocks: {sim}"
    page.screenshot(path=str(tmp_path / "console-encode.png"), full_page=True)
    page.click("#tab-extract")  # zero-shot classification with MiniLM, for real
    page.select_option("#extract-model", "sentence-transformers/all-MiniLM-L6-v2")
    page.fill("#extract-labels", "finance, animal")  # the better label second: shown first only if ranked
    page.fill("#extract-text", "a kitten rests on a rug")
    page.click("#extract-run")
    page.wait_for_selector("#extract-result table tbody tr", timeout=180_000)
    first = page.locator("#extract-result table tbody tr").first.inner_text().split("\t")
    assert first[0] == "animal", first
    assert not errors, errors
    shutil.copy(tmp_path / "console-encode.png", tmp_path / "console.png")
    page.close()


EXTRACTOR = {"name": "test/extractor", "tasks": ["extract"], "outputs": [], "dims": {}, "loaded": False}
ENTITIES = {"model": "test/extractor", "items": [{"id": "item-0", "entities": [
    {"text": "Ada Lovelace", "label": "person", "score": 0.93, "start": 0, "end": 12},
    {"text": "Acme Harbour Ltd", "label": "organisation", "score": 0.88, "start": 20, "end": 36}]}]}  # fmt: skip


@pytest.mark.slow
def test_console_shows_extract_when_a_model_can(browser: object, live: LiveServer, tmp_path: Path) -> None:
    """No extraction model exists in this version, so the browser's requests for the model list and the
    extract call are answered by the test (Playwright routing): a stand-in for what cannot run here yet."""
    import json

    page = browser.new_page(viewport={"width": 1200, "height": 900})  # type: ignore[attr-defined]
    page.add_init_script(f"sessionStorage.setItem('shoal.apiKey', '{KEY}')")  # the key, as typed before

    def models(route: object) -> None:
        real = route.fetch().json()  # type: ignore[attr-defined]
        route.fulfill(json={"models": [*real["models"], EXTRACTOR]})  # type: ignore[attr-defined]

    seen: list[dict[str, object]] = []

    def extract(route: object) -> None:
        seen.append(json.loads(route.request.post_data))  # type: ignore[attr-defined]
        route.fulfill(json=ENTITIES)  # type: ignore[attr-defined]

    page.route("**/v1/models", models)
    page.route("**/v1/extract/**", extract)
    page.goto(live.url + "/#/playground")
    page.click("#tab-extract")
    page.click("#page-playground .card button")
    page.wait_for_selector("#page-playground mark")
    assert [m.inner_text() for m in page.locator("#page-playground mark").all()] == ["Ada Lovelace", "Acme Harbour Ltd"]
    assert seen[0]["params"] == {"labels": ["person", "organisation", "date"]}
    page.screenshot(path=str(tmp_path / "console-extract.png"), full_page=True)
    page.close()


@pytest.mark.slow
def test_docs_render_offline_in_a_browser(browser: object, live: LiveServer, tmp_path: Path) -> None:
    """Swagger UI at /docs draws every route from files the server itself serves (the machine has no internet)."""
    context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {KEY}"})  # type: ignore[attr-defined]
    page = context.new_page()
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(live.url) else None)
    page.goto(live.url + "/docs")
    page.wait_for_selector(".swagger-ui .opblock-summary-path", timeout=60_000)
    shown = page.inner_text(".swagger-ui")
    assert "/v1/encode/{model}" in shown and "/v1/status" in shown
    assert not outside, f"the docs page asked the network for {outside}"
    page.screenshot(path=str(tmp_path / "docs.png"))
    context.close()


@pytest.fixture(scope="module")
def live_with_store(browser: object, tmp_path_factory: pytest.TempPathFactory, engine: object) -> Iterator[LiveServer]:
    """`shoal serve --db` over a folder ingested here, with a tiny cross-encoder from a model root (random
    weights: its scores mean nothing, but the console must show them as the API ranks them)."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline import ingest
    from tests.test_store_commands import write_docs
    from tests.tiny_models import make

    base = tmp_path_factory.mktemp("console-store")
    docs = write_docs(base / "docs")
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's event loop; ingest runs its own
        pool.submit(ingest, docs, db=f"lancedb://{base / 'db'}", client=engine).result()
    make("bert", "ForSequenceClassification", base / "models" / "tiny-ce", num_labels=1)
    args = ["--db", f"lancedb://{base / 'db'}", "--model-root", str(base / "models")]
    server = LiveServer(env={"SHOAL_API_KEY": KEY}, args=args).wait_ready()
    yield server
    server.stop()


@pytest.mark.slow
def test_console_searches_the_servers_store(browser: object, live_with_store: LiveServer, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1200, "height": 900})  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(f"sessionStorage.setItem('shoal.apiKey', '{KEY}')")
    page.goto(live_with_store.url + "/")
    page.click("nav a[href='#/search']")
    page.fill("#search-query", "impeller blocked")
    page.click("#page-search button[type=submit]")
    page.wait_for_selector("#search-result .hit", timeout=120_000)
    first = page.locator("#search-result .hit").first.inner_text()
    assert "pump.md" in first and "E-417" in first, first
    assert re.search(r"^\d+ hits?$", page.inner_text("#search-result p.muted"), re.M)
    page.screenshot(path=str(tmp_path / "console-search.png"), full_page=True)
    assert not errors, errors
    page.close()


@pytest.mark.slow
def test_console_scores_documents_as_the_api_ranks_them(
    browser: object, live_with_store: LiveServer, tmp_path: Path
) -> None:
    import httpx

    query, docs = "where is the ferry?", ["the ferry leaves at nine", "bananas are yellow", "pumps need clearing"]
    page = browser.new_page(viewport={"width": 1200, "height": 900})  # type: ignore[attr-defined]
    page.add_init_script(f"sessionStorage.setItem('shoal.apiKey', '{KEY}')")
    page.goto(live_with_store.url + "/#/playground")
    page.click("#tab-score")
    page.select_option("#score-model", "tiny-ce")
    page.fill("#score-query", query)
    page.fill("#score-docs", "\n".join(docs))
    page.click("#score-run")
    page.wait_for_selector("#score-result table tbody tr")
    shown = [r.inner_text().split("\t") for r in page.locator("#score-result table tbody tr").all()]
    body = {"query": {"text": query}, "items": [{"id": str(i), "text": d} for i, d in enumerate(docs)]}
    api = httpx.post(f"{live_with_store.url}/v1/score/tiny-ce", json=body, headers=auth(), timeout=60).json()
    ranked = api["scores"]
    assert [row[2] for row in shown] == [docs[int(s["item_id"])] for s in ranked], (shown, ranked)
    assert all(abs(float(row[1]) - s["score"]) <= 6e-5 for row, s in zip(shown, ranked, strict=True)), (shown, ranked)
    page.screenshot(path=str(tmp_path / "console-score.png"), full_page=True)
    page.close()
