"""shoal: many small task-specific models served from one engine. Public SDK re-exports.

The re-exports resolve on first use, so `import shoal` stays light (no torch, no transformers): the HTTP
client never needs them, and the in-process engine imports them when it is first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.client.http import AsyncClient
    from engine.client.protocol import ShoalClient
    from engine.client.retry import RetryPolicy
    from engine.client.sync import Client
    from engine.config import EngineSettings
    from engine.errors import ShoalError
    from engine.runtime import AsyncEngine, Engine

__all__ = [
    "AsyncClient",
    "AsyncEngine",
    "Client",
    "Engine",
    "EngineSettings",
    "RetryPolicy",
    "ShoalClient",
    "ShoalError",
]
__version__ = "0.1.0"

_HOMES = {
    "AsyncClient": "engine.client.http",
    "Client": "engine.client.sync",
    "RetryPolicy": "engine.client.retry",
    "ShoalClient": "engine.client.protocol",
    "EngineSettings": "engine.config",
    "ShoalError": "engine.errors",
    "AsyncEngine": "engine.runtime",
    "Engine": "engine.runtime",
}


def __getattr__(name: str) -> object:  # the names are typed by the imports above
    if name not in _HOMES:
        raise AttributeError(f"module 'shoal' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
