"""Error messages that leave a server reveal none of its paths (local model folders off): each absolute
filesystem path in a message becomes `<server path>`, in a local URL too (`lancedb://<server path>`). URL
paths of the API (/v1/..., /v2/...) and of remote URLs stay."""

from __future__ import annotations

import re
from collections.abc import Callable

from engine.config import EngineSettings
from engine.tasks.results import JSONObject, JSONValue

# an absolute path of two or more parts, not part of a URL, a model id ("org/name") or a relative path
SERVER_PATH = re.compile(r"""(?<![\w.:/~-])/(?!v[12]/)[^\s'"/]+(?:/[^\s'"/]*)+""")
# an embedded store's or a file URL's absolute path: `lancedb:///srv/data` (the scheme stays)
LOCAL_URL = re.compile(r"""\b([a-z][a-z0-9+.-]*):///[^\s'"(),;]+""")
Scrub = Callable[[str], str]


def _keep(message: str) -> str:
    return message


def _hide(message: str) -> str:
    return SERVER_PATH.sub("<server path>", LOCAL_URL.sub(r"\1://<server path>", message))


def scrubber(settings: EngineSettings) -> Scrub:
    """Identity where clients may name local folders anyway; path-hiding everywhere else."""
    return _keep if settings.local_models else _hide


def scrub_value(value: JSONValue, scrub: Scrub) -> JSONValue:
    """A JSON value with every string in it scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return scrub_body(value, scrub)
    if isinstance(value, list):
        return [scrub_value(v, scrub) for v in value]
    return value


def scrub_body(body: JSONObject, scrub: Scrub) -> JSONObject:
    """An error body with every string in it scrubbed."""
    return {k: scrub_value(v, scrub) for k, v in body.items()}
