"""TextTokenizer (engine/model/tokenizer.py): the ids and type ids of texts and pairs exactly as the tokenizer's
full encode gives them (the engine asks for ids without offsets), truncation refused when it is off."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import InputTooLong
from engine.model.tokenizer import TextTokenizer, load_tokenizer

TEXTS = ["The cat sat on the mat.", "naïve café résumé — ünïcödé", "", "word " * 300, "x" * 50, "a\tb\nc  d"]


@pytest.fixture(scope="module")
def tok(minilm_path: Path) -> TextTokenizer:
    return TextTokenizer(load_tokenizer(minilm_path, 64), 64)


def test_ids_and_type_ids_match_the_full_encode(tok: TextTokenizer) -> None:
    full = tok.tokenizer.encode_batch(TEXTS)
    assert tok(TEXTS, truncate=True) == [e.ids for e in full]
    pairs = [("a query", t) for t in TEXTS]
    want = [(e.ids, e.type_ids) for e in tok.tokenizer.encode_batch(pairs)]
    assert tok.pairs(pairs, truncate=True) == want
    assert max(len(ids) for ids in tok(TEXTS, truncate=True)) == 64  # the long text cut at the model's length


def test_an_over_long_text_without_truncation_is_refused_by_index(tok: TextTokenizer) -> None:
    with pytest.raises(InputTooLong, match="item 3"):
        tok(TEXTS, truncate=False)
    with pytest.raises(InputTooLong, match="pair 0"):
        tok.pairs([("q", "word " * 300)], truncate=False)
    assert len(tok(TEXTS[:3], truncate=False)) == 3
