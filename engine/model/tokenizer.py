"""Fast tokenisation with the model's own tokenizer; over-long input is truncated or refused."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import resolve_weights
from engine.errors import InputTooLong, InvalidInput, ModelLoadFailed


def load_tokenizer(folder: Path, max_len: int) -> Tokenizer:
    """tokenizer.json when present, else the fast tokenizer transformers builds from vocab files."""
    path = folder / "tokenizer.json"
    if path.is_file():
        tok = Tokenizer.from_file(str(path))
    else:
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(folder), use_fast=True).backend_tokenizer
        except Exception as e:  # noqa: BLE001 - any failure is a load failure with its reason
            raise ModelLoadFailed(f"{folder}: no usable tokenizer: {e}") from e
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return tok


class TextTokenizer:
    """Token ids per text; knows the model's length limit and the truncation policy."""

    def __init__(self, tokenizer: Tokenizer, max_len: int) -> None:
        self.tokenizer = tokenizer
        self.max_len = max_len
        # ids (and type ids) without character offsets, which nothing here reads: 1.2x faster on MiniLM's
        # tokenizer (tokenizers 0.21+; the plain call before)
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    def __call__(self, texts: list[str], truncate: bool) -> list[list[int]]:
        encodings = self._encode_batch(texts)
        if not truncate:
            for i, enc in enumerate(encodings):
                if enc.overflowing:
                    raise InputTooLong(
                        f"item {i} is longer than the model's {self.max_len} tokens and truncation is off"
                    )
        return [enc.ids for enc in encodings]

    def pairs(self, pairs: list[tuple[str, str]], truncate: bool) -> list[tuple[list[int], list[int]]]:
        """(ids, token type ids) of each (query, document) pair, as a cross-encoder reads them."""
        encodings = self._encode_batch(pairs)
        if not truncate:
            for i, enc in enumerate(encodings):
                if enc.overflowing:
                    raise InputTooLong(
                        f"pair {i} is longer than the model's {self.max_len} tokens and truncation is off"
                    )
        return [(enc.ids, enc.type_ids) for enc in encodings]

    def plain(self, texts: list[str]) -> list[list[int]]:
        """Token ids without special tokens and without truncation (prompt pieces)."""
        return [enc.ids for enc in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, arrays: list[list[int]]) -> list[str]:
        """Texts of token-id arrays, special tokens dropped; INVALID_INPUT for an id outside the vocabulary."""
        top = self.tokenizer.get_vocab_size()
        for i, ids in enumerate(arrays):
            bad = next((t for t in ids if not 0 <= t < top), None)
            if bad is not None:
                raise InvalidInput(f"input.{i}: token id {bad} is outside the model's vocabulary (0..{top - 1})")
        return list(self.tokenizer.decode_batch(arrays, skip_special_tokens=True))

    def token_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def special_ids(self) -> set[int]:
        """Ids of the special tokens ([CLS], </s>, <pad>, ...)."""
        return {i for i, tok in self.tokenizer.get_added_tokens_decoder().items() if tok.special}


def tokenizer_for(model: str, model_dir: Path | None = None, offline: bool | None = None) -> TextTokenizer:
    """The tokenizer a catalogue id (or checkpoint folder) uses, without loading its weights.

    Callers outside the engine (chunking in the pipeline) count tokens with it.
    """
    card = Catalogue(model_dir).get(model)
    folder = resolve_weights(card, offline=offline)
    return TextTokenizer(load_tokenizer(folder, card.max_seq_len), card.max_seq_len)
