"""The per-request limits and text checks, each applied at the edge before the work it bounds.

Sizes over a configured limit are 413 PAYLOAD_TOO_LARGE naming the limit's setting; text a tokenizer cannot
take (lone surrogates, which only JSON's `\\ud800` escapes can carry) is 400 INVALID_INPUT, or each such code
point becomes U+FFFD when `invalid_text` is "replace". Every check is one pass over what it checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engine.config import EngineSettings
from engine.errors import InvalidInput, PayloadTooLarge

SURROGATE = re.compile("[\ud800-\udfff]")


def check_count(where: str, n: int, limit: int, setting: str) -> None:
    """413 when a list holds more entries than its limit (checked before the entries are looked at)."""
    if n > limit:
        raise PayloadTooLarge(f"{where}: {n:,} entries is over the limit of {limit:,} ({setting})")


def count_before_parsing(body: object, key: str, limit: int, setting: str = "SHOAL_MAX_ITEMS") -> None:
    """The item-count limit on a decoded body's list `key`, before any item is validated."""
    if isinstance(body, dict):
        value = body.get(key)
        if isinstance(value, list):
            check_count(key, len(value), limit, setting)


def clean_text(
    where: str, text: str, settings: EngineSettings, limit: int | None = None, setting: str = "SHOAL_MAX_ITEM_CHARS"
) -> str:
    """The text, checked for length (413) and for lone surrogates (400, or replaced by U+FFFD)."""
    limit = settings.max_item_chars if limit is None else limit
    if len(text) > limit:
        raise PayloadTooLarge(f"{where}: {len(text):,} characters is over the limit of {limit:,} ({setting})")
    if text.isascii():
        return text
    bad = SURROGATE.search(text)
    if bad is None:
        return text
    if settings.invalid_text == "replace":
        return SURROGATE.sub("\ufffd", text)
    raise InvalidInput(
        f"{where}: a lone surrogate U+{ord(bad.group()):04X} at character {bad.start()} is not valid Unicode text; "
        "send UTF-8 (or JSON escapes of complete surrogate pairs)"
    )


def check_item_id(where: str, value: str, settings: EngineSettings) -> None:
    """400 for an item id that is over-long, or holds control characters or lone surrogates."""
    if len(value) > settings.max_id_chars:
        raise InvalidInput(f"{where}: {len(value):,} characters is over the limit of {settings.max_id_chars:,}")
    if not value.isprintable():
        raise InvalidInput(f"{where}: an id may not hold control characters or lone surrogates")


def clean_instruction(where: str, text: str | None, settings: EngineSettings) -> str | None:
    """An instruction (it prefixes every item, so its limit is much lower than an item's)."""
    if text is None:
        return None
    return clean_text(where, text, settings, settings.max_instruction_chars, "SHOAL_MAX_INSTRUCTION_CHARS")


def check_tokens(estimated: int, settings: EngineSettings) -> None:
    """413 when a request's estimated tokens (instruction and query prefixes included) are over the limit."""
    if estimated > settings.max_request_tokens:
        raise PayloadTooLarge(
            f"the request comes to about {estimated:,} tokens (characters / 4, prefixes counted for every item), "
            f"over the limit of {settings.max_request_tokens:,} (SHOAL_MAX_REQUEST_TOKENS); split it"
        )


def check_labels(labels: Sequence[object], settings: EngineSettings, where: str = "params.labels") -> list[str]:
    """Extraction labels: at most `max_labels`, each a non-empty string of at most `max_label_chars`."""
    check_count(where, len(labels), settings.max_labels, "SHOAL_MAX_LABELS")
    out = []
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label.strip():
            raise InvalidInput(f"{where}.{i}: a label is a non-empty string")
        out.append(clean_text(f"{where}.{i}", label, settings, settings.max_label_chars, "SHOAL_MAX_LABEL_CHARS"))
    return out
