"""Expected errors as one or two lines and an exit code (0 ok, 1 usage or config, 2 unreachable, 3 files failed).

Nothing here imports the modules whose errors it explains: an error's class is checked only when its module
is already loaded (it must be, for the error to exist), so the CLI's start-up stays light.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Iterable
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
    "OFFLINE",  # `shoal models pull` with HF_HUB_OFFLINE or SHOAL_OFFLINE set
    "HUB_UNREACHABLE",
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
    "INVALID_SHARD": "--shard I/N takes shard I (0 to N-1) of N writers, e.g. --shard 0/4",
    "SHARD_COUNT_CHANGED": "every shard of one run uses the same N; a new N is safe once the old shards are done",
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


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to a mistyped word (case-insensitive; a model id also by its name after the
    organisation, so `all-minilm-l6-v2` finds `sentence-transformers/all-MiniLM-L6-v2`), or None."""
    import difflib

    keys: dict[str, str] = {}
    for c in choices:
        keys.setdefault(c.lower(), c)
        keys.setdefault(c.rsplit("/", 1)[-1].lower(), c)
    typed = word.lower()
    found = difflib.get_close_matches(typed, list(keys), n=1, cutoff=0.75)
    if not found and "/" in typed:
        found = difflib.get_close_matches(typed.rsplit("/", 1)[-1], list(keys), n=1, cutoff=0.75)
    best = keys[found[0]] if found else None
    return None if best is None or best == word else best


# the engine words its errors for a server; run in-process, the CLI says where it really happened
IN_PROCESS_WORDS = (
    ("on this server", "on this machine"),
    ("this server serves", "the engine serves"),
    ("a checkpoint folder on the server", "a checkpoint folder on this machine"),
    ("off on this server", "off here"),
    ("under the server's model roots", "under the model roots"),
)
NO_MODEL = re.compile(r"no model '([^']{1,512})'")
NO_WEIGHTS = re.compile(r"model '([^']{1,512})' has no weights")
PULL_HINT = "`shoal models pull {model}` downloads them{where} (network access needed once); " + WEIGHTS_HINT


def _model_ids() -> list[str]:
    """The catalogue's ids (a suggestion for a mistyped model; a server's catalogue may hold more)."""
    try:
        from engine.catalogue.catalogue import Catalogue

        return Catalogue().ids()
    except Exception:  # noqa: BLE001 - a suggestion is a nicety: never let it hide the error itself
        return []


def _from_a_server(exc: BaseException) -> bool:
    """Whether the error came back from a shoal server (raised in the HTTP client), not the engine in-process."""
    seen: BaseException | None = exc
    while seen is not None:
        for frame, _ in traceback.walk_tb(seen.__traceback__):
            if frame.f_globals.get("__name__") == "engine.client.http":  # raise_for_error: a server's answer
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reworded(code: str, message: str, exc: BaseException) -> str:
    """A message worded for where it happened (in-process: "this machine"), without the engine's list of
    ways to provide weights (the hint points to them)."""
    if code == "MODEL_UNAVAILABLE":
        message = message.split(" To provide them:", 1)[0].rstrip()
    if not _from_a_server(exc):
        for said, meant in IN_PROCESS_WORDS:
            message = message.replace(said, meant)
    return message


def explain(exc: BaseException) -> Failure | None:
    """The Failure for an expected error, or None for a bug (which deserves its traceback)."""
    if _transport_error(exc):
        return Failure("UNREACHABLE", one_line(f"{type(exc).__name__}: {exc}"), HINTS["UNREACHABLE"], UNREACHABLE)
    if not _expected(exc):
        return None
    code = str(getattr(exc, "code", None) or type(exc).__name__)
    message = one_line(_reworded(code, str(getattr(exc, "message", None) or exc), exc))
    hint = getattr(exc, "hint", None) or HINTS.get(code)
    if (typo := NO_MODEL.search(message)) and (close := did_you_mean(typo.group(1), _model_ids())):
        hint = f"did you mean {close!r}? " + HINTS["MODEL_NOT_FOUND"]
    if code == "MODEL_UNAVAILABLE" and (absent := NO_WEIGHTS.search(message)):
        where = " on the server's machine" if _from_a_server(exc) else ""
        hint = PULL_HINT.format(model=absent.group(1), where=where)
    exit_code = getattr(exc, "exit_code", None)
    if not isinstance(exit_code, int):
        exit_code = UNREACHABLE if code in UNREACHABLE_CODES else USAGE
    return Failure(code, message, hint, exit_code)
