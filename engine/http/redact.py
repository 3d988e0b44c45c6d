"""Error messages that leave a server reveal none of its paths (local model folders off): each absolute
filesystem path in a message becomes `<server path>`. URL paths of the API (/v1/..., /v2/...) stay."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from engine.config import EngineSettings

# an absolute path of two or more parts, not part of a URL, a model id ("org/name") or a relative path
SERVER_PATH = re.compile(r"""(?<![\w.:/~-])/(?!v[12]/)[^\s'"/]+(?:/[^\s'"/]*)+""")
Scrub = Callable[[str], str]


def _keep(message: str) -> str:
    return message


def _hide(message: str) -> str:
    return SERVER_PATH.sub("<server path>", message)


def scrubber(settings: EngineSettings) -> Scrub:
    """Identity where clients may name local folders anyway; path-hiding everywhere else."""
    return _keep if settings.local_models else _hide


def scrub_body(body: Any, scrub: Scrub) -> Any:
    """An error body with every string in it scrubbed."""
    if isinstance(body, str):
        return scrub(body)
    if isinstance(body, dict):
        return {k: scrub_body(v, scrub) for k, v in body.items()}
    if isinstance(body, (list, tuple)):
        return [scrub_body(v, scrub) for v in body]
    return body
