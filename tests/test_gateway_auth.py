"""Gateway auth (issue 14): several keys from a file and the environment, held hashed; no key, a wrong key, a
key of another length, a key in the URL, an exceeded rate limit each get their status and change nothing
else; a malformed key configuration refuses to start; CORS is off unless configured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.config import EngineSettings
from engine.http.auth import AuthConfigError, KeyRing, RateLimiter, auth_from, read_keys
from tests.hardening_support import MINILM
from tests.helpers import REPO, LiveServer

pytestmark = pytest.mark.slow
KEY_A, KEY_B, KEY_ENV = "alpha-key-0123456789", "bravo-key-0123456789", "env-key-0123456789ab"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    keys = tmp_path_factory.mktemp("auth") / "api-keys"
    keys.write_text(f"# one key per line\n{KEY_A}\n\n{KEY_B}\n")
    env = {
        "SHOAL_API_KEYS_FILE": str(keys),
        "SHOAL_API_KEY": KEY_ENV,
        "SHOAL_RATE_LIMIT_PER_S": "0.05",  # one request per 20 s once a key's burst is spent
        "SHOAL_RATE_LIMIT_BURST": "4",
    }
    srv = LiveServer(env=env).wait_ready()
    yield srv
    srv.stop()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def encode(server: LiveServer, headers: dict[str, str], query: str = "") -> httpx.Response:
    url = f"{server.url}/v1/encode/{MINILM}{query}"
    return httpx.post(url, json={"items": [{"text": "x"}]}, headers=headers, timeout=120)


def minilm_loaded(server: LiveServer) -> bool:
    models = httpx.get(f"{server.url}/v1/models", headers=bearer(KEY_B), timeout=30).json()["models"]
    return next(m for m in models if m["name"] == MINILM)["loaded"]


REFUSED = [
    ("no key", {}),
    ("wrong key of the same length", bearer("x" * len(KEY_A))),
    ("a shorter key", bearer(KEY_A[:-1])),
    ("a longer key", bearer(KEY_A + "0")),
    ("an empty bearer", {"Authorization": "Bearer"}),
    ("another scheme", {"Authorization": f"Basic {KEY_A}"}),
    ("a key as a bare header", {"Authorization": KEY_A}),
]


def test_refused_requests_get_401_and_change_nothing(server: LiveServer) -> None:
    for name, headers in REFUSED:
        r = encode(server, headers)
        assert r.status_code == 401 and r.json()["detail"]["code"] == "UNAUTHORIZED", name
        r = httpx.post(f"{server.url}/v1/embeddings", json={"model": MINILM, "input": "x"}, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED", name  # OpenAI's shape
    for query in (f"?api_key={KEY_A}", f"?key={KEY_A}", f"?access_token={KEY_A}", "?token=abc"):
        r = encode(server, bearer(KEY_A), query)  # refused even with a good header: the URL leaked it
        assert r.status_code == 401 and "URL" in r.json()["detail"]["message"], query
    assert not minilm_loaded(server)  # nothing of the refused requests reached the engine
    metrics = httpx.get(f"{server.url}/metrics", headers=bearer(KEY_B)).text
    assert KEY_A not in metrics and 'model="unknown"' in metrics
    assert "sentence-transformers" not in metrics  # no request got far enough to name its model


def test_every_configured_key_works_and_probes_stay_open(server: LiveServer) -> None:
    for key in (KEY_B, KEY_ENV):
        assert encode(server, bearer(key)).status_code == 200
    assert (
        httpx.get(f"{server.url}/healthz").status_code == 200 and httpx.get(f"{server.url}/readyz").status_code == 200
    )
    assert httpx.get(f"{server.url}/metrics").status_code == 401  # keys on, no metrics key: /metrics needs one
    assert httpx.get(f"{server.url}/metrics", headers=bearer(KEY_B)).status_code == 200


def test_an_exceeded_rate_limit_is_429_for_that_key_only(server: LiveServer) -> None:
    statuses = [encode(server, bearer(KEY_A)).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
    r = encode(server, bearer(KEY_A))
    assert r.status_code == 429 and r.json()["detail"]["code"] == "RATE_LIMITED" and int(r.headers["retry-after"]) >= 1
    assert encode(server, bearer(KEY_ENV)).status_code == 200  # another key has its own bucket


def test_cors_is_off_by_default(server: LiveServer) -> None:
    r = httpx.options(
        f"{server.url}/v1/encode/{MINILM}",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in r.headers
    r = encode(server, {**bearer(KEY_B), "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers


# -- refusing to start ------------------------------------------------------------------------------


def start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")} | {"HF_HUB_OFFLINE": "1", **env}
    cmd = [sys.executable, "-m", "shoal.cli", "serve", "--port", "1", "--log-level", "warning"]
    return subprocess.run(cmd, env=full, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("name", "file_text", "env", "says"),
    [
        ("a keys file that does not exist", None, {"SHOAL_API_KEYS_FILE": "/nonexistent/api-keys"}, "cannot read"),
        ("a keys file with no key", "# nothing\n\n", {}, "holds no key"),
        ("a key with a space", "good-key-123\nbad key\n", {}, "line 2"),
        ("an empty SHOAL_API_KEY", None, {"SHOAL_API_KEY": ""}, "empty"),
        ("a rate limit without keys", None, {"SHOAL_RATE_LIMIT_PER_S": "5"}, "configure API keys"),
        (
            "a rate limit that is not a number",
            None,
            {"SHOAL_API_KEY": KEY_A, "SHOAL_RATE_LIMIT_PER_S": "fast"},
            "rate_limit",
        ),
    ],
)
def test_a_malformed_key_configuration_refuses_to_start(
    tmp_path: Path, name: str, file_text: str | None, env: dict[str, str], says: str
) -> None:
    if file_text is not None:
        (tmp_path / "keys").write_text(file_text)
        env = {**env, "SHOAL_API_KEYS_FILE": str(tmp_path / "keys")}
    done = start(env)
    assert done.returncode == 1, (name, done.stdout, done.stderr)  # a configuration error (README: exit codes)
    out = done.stdout + done.stderr
    assert says in out and "Traceback" not in out, out


# -- the pieces, in process -------------------------------------------------------------------------


def test_keys_are_held_hashed_and_matched_against_all(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text(f"{KEY_A}\n{KEY_B}\n")
    ring = KeyRing(read_keys(EngineSettings(api_keys_file=tmp_path / "keys", api_key=f"{KEY_ENV}, other-key-1")))
    assert len(ring) == 4
    assert ring.match(KEY_A) is not None and ring.match(KEY_B) != ring.match(KEY_A)
    assert ring.match(KEY_A[:-1]) is None and ring.match("") is None and ring.match(KEY_A + " ") is None
    assert KEY_A.encode() not in b"".join(ring._digests)  # only digests are kept
    with pytest.raises(AuthConfigError):
        auth_from(EngineSettings(metrics_key="  "))
    assert auth_from(EngineSettings()).keys is None  # no configuration at all: auth off


def test_rate_limiter_refills_per_key() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0])
    assert [limiter.take(b"a") for _ in range(2)] == [None, None]
    wait = limiter.take(b"a")
    assert wait is not None and wait == pytest.approx(0.5)
    assert limiter.take(b"b") is None
    now[0] = 0.5
    assert limiter.take(b"a") is None
