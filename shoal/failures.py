"""Expected errors as one or two lines and an exit code (0 ok, 1 usage or config, 2 unreachable, 3 files failed).

Nothing here imports the modules whose errors it explains: an error's class is checked only when its module
is already loaded (it must be, for the error to exist), so the CLI's start-up stays light.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

OK, USAGE, UNREACHABLE, FILES_FAILED = 0, 1, 2, 3

# (module, class) of every error a user can cause; each carries a `code` and a one-line `message`
EXPECTED = (
    ("engine.errors", "ShoalError"),
    ("connectors.base", "StoreError"),
    ("connectors.filters", "FilterError"),
    ("pipeline.config", "ConfigError"),
    ("pipeline.manifest", "StoreLocked"),
    ("agent_tools.errors", "ShoalError"),
    ("shoal.failures", "CliError"),
)
# codes meaning "a server or store did not answer, or is busy for now": try again later (exit 2)
UNREACHABLE_CODES = {
    "UNREACHABLE",
    "STORE_UNREACHABLE",
    "QUEUE_FULL",
    "MODEL_LOADING",
    "RESOURCE_EXHAUSTED",
    "DEADLINE_EXCEEDED",
}
WEIGHTS_HINT = "`shoal models` shows which models have weights here; see docs/troubleshooting.md#missing-weights"
HINTS = {
    "UNREACHABLE": "is `shoal serve` running there? Start one, or drop --url to run the models in-process",
    "STORE_UNREACHABLE": "check the store URL (host, port) and that the store's server is running",
    "MODEL_NOT_FOUND": "`shoal models` lists the catalogue; a local checkpoint folder works as a model too",
    "MODEL_LOAD_FAILED": WEIGHTS_HINT,
    "MODEL_UNAVAILABLE": WEIGHTS_HINT,
    "INVALID_FILTER": "--where takes FIELD=VALUE (see `shoal search --help`); --filter is the store's own syntax",
    "UNKNOWN_FIELD": "fields: id, source, root, title, kind, chunk_index, pages, heading_path, entity:<label> ...",
    "STORE_LOCKED": "another ingest is running on this store; wait for it to finish",
    "NO_STORE": "run `shoal ingest PATH` first, or point --db at an existing store",
    "NO_COLLECTION": "`shoal collections` lists the collections of a store",
    "PATH_NOT_FOUND": "check the path; nothing was recorded",
    "MISSING_DRIVER": "install the store's extra, e.g. pip install 'shoal[qdrant]'",
    "UNAUTHORIZED": "pass the server's key with --api-key or SHOAL_API_KEY",
}


class CliError(Exception):
    """An error the command line itself reports (a path that does not exist, a refused confirmation)."""

    def __init__(self, code: str, message: str, hint: str | None = None, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.code, self.message, self.hint, self.exit_code = code, message, hint, exit_code


@dataclass(frozen=True)
class Failure:
    """What the user sees for an expected error: a code, one line of what went wrong, one of what to do."""

    code: str
    message: str
    hint: str | None
    exit_code: int

    def lines(self) -> list[str]:
        out = [f"{self.code}: {self.message}"]
        return [*out, f"  {self.hint}"] if self.hint else out


def one_line(text: str, limit: int = 600) -> str:
    """Collapse a message to one line of at most `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _expected(exc: BaseException) -> bool:
    for module, name in EXPECTED:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def _transport_error(exc: BaseException) -> bool:
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.TransportError)


def explain(exc: BaseException) -> Failure | None:
    """The Failure for an expected error, or None for a bug (which deserves its traceback)."""
    if _transport_error(exc):
        return Failure("UNREACHABLE", one_line(f"{type(exc).__name__}: {exc}"), HINTS["UNREACHABLE"], UNREACHABLE)
    if not _expected(exc):
        return None
    code = str(getattr(exc, "code", None) or type(exc).__name__)
    message = one_line(getattr(exc, "message", None) or str(exc))
    hint = getattr(exc, "hint", None) or HINTS.get(code)
    exit_code = getattr(exc, "exit_code", None)
    if not isinstance(exit_code, int):
        exit_code = UNREACHABLE if code in UNREACHABLE_CODES else USAGE
    return Failure(code, message, hint, exit_code)
