"""Gateway auth: API keys held as SHA-256 digests and matched in constant time, per-key rate limits, and a
configuration that fails closed (a malformed or unreadable one refuses to start; it never runs open).

Keys come from SHOAL_API_KEY (one key, or several separated by commas) and from SHOAL_API_KEYS_FILE (one
key per line; blank lines and lines starting with '#' are skipped). A key is printable ASCII with no
spaces. The raw keys are dropped once hashed; only their digests stay in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from engine.config import EngineSettings

KEY_PARAMS = frozenset({"api_key", "apikey", "api-key", "key", "access_token", "token", "auth", "authorization"})
KEY_PARAMS |= {"x-api-key", "x_api_key", "api_token", "api-token", "bearer"}


class AuthConfigError(ValueError):
    """The key configuration cannot be used; the gateway must not start."""


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _check_key(key: str, where: str) -> str:
    if not key:
        raise AuthConfigError(f"{where}: an empty API key")
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise AuthConfigError(f"{where}: an API key must be printable ASCII without spaces")
    return key


def read_keys(settings: EngineSettings) -> list[str]:
    """Every configured key, checked; raises AuthConfigError for anything malformed or unreadable."""
    keys: list[str] = []
    if settings.api_key is not None:
        parts = [p.strip() for p in settings.api_key.split(",")]
        if not any(parts):
            raise AuthConfigError("SHOAL_API_KEY is set but empty; unset it to run without auth")
        keys += [_check_key(p, f"SHOAL_API_KEY entry {i + 1}") for i, p in enumerate(parts)]
    if settings.api_keys_file is not None:
        path = settings.api_keys_file
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise AuthConfigError(f"cannot read the API keys file {path}: {type(e).__name__}: {e}") from None
        found = 0
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                keys.append(_check_key(line, f"{path} line {n}"))
                found += 1
        if not found:
            raise AuthConfigError(f"the API keys file {path} holds no key; the gateway would refuse every request")
    return keys


class KeyRing:
    """The digests of the accepted keys; `match` compares against every one, so its time does not depend
    on which key (if any) matched, nor on the presented key's length (it is hashed first)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = tuple(dict.fromkeys(digest(k) for k in keys))

    def __len__(self) -> int:
        return len(self._digests)

    def match(self, presented: str) -> bytes | None:
        """The matching key's digest, else None."""
        d = digest(presented)
        found: bytes | None = None
        for known in self._digests:
            if hmac.compare_digest(d, known):
                found = known
        return found


@dataclass
class RateLimiter:
    """A token bucket per key digest (a fixed set: one per configured key); `take` answers the seconds to
    wait when the key is over its rate, else None."""

    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[bytes, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: bytes) -> float | None:
        now = self.clock()
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0, now)
        return None


METRICS_REFUSAL = (
    "/metrics needs 'Authorization: Bearer <key>': the metrics key, or an API key when no metrics key is set"
)


@dataclass(frozen=True)
class Auth:
    """What the edge checks: API keys (None: auth off), the keys that open /metrics (the metrics key, else the API
    keys; None: open), and the per-key rate limit."""

    keys: KeyRing | None
    metrics_keys: KeyRing | None
    limiter: RateLimiter | None


def auth_from(settings: EngineSettings) -> Auth:
    """The gateway's auth, or AuthConfigError: it refuses to start rather than run open."""
    keys = read_keys(settings)
    metrics: KeyRing | None = KeyRing(keys) if keys else None  # with API keys and no metrics key, they open it
    if settings.metrics_key is not None:
        metrics = KeyRing([_check_key(settings.metrics_key.strip(), "SHOAL_METRICS_KEY")])
    limiter = None
    if settings.rate_limit_per_s is not None:
        if not keys:
            raise AuthConfigError("SHOAL_RATE_LIMIT_PER_S limits each API key; configure API keys too")
        burst = settings.rate_limit_burst or max(1, math.ceil(2 * settings.rate_limit_per_s))
        limiter = RateLimiter(settings.rate_limit_per_s, burst)
    return Auth(KeyRing(keys) if keys else None, metrics, limiter)


def bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, if any."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def key_in_query(query_string: bytes) -> bool:
    """Whether the URL carries something named like a credential (refused: URLs end up in logs)."""
    if not query_string:
        return False
    from urllib.parse import parse_qsl

    names = {k.lower() for k, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)}
    return bool(names & KEY_PARAMS)
