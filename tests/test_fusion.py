"""The hybrid fusion of connectors/fusion.py on rankings written for the test: the convex combination of
normalised scores, the score of a chunk one ranking missed, and the rare-term signal."""

from __future__ import annotations

import pytest

from connectors.base import Hit
from connectors.fusion import Ranking, depth, fuse, rare_words


def hit(i: str, score: float, text: str = "") -> Hit:
    return Hit(i, score, text or f"chunk {i}")


def test_convex_combination_of_normalised_scores() -> None:
    dense = Ranking("dense", [hit("a", 0.8), hit("b", 0.6), hit("c", 0.2)], 3)
    text = Ranking("text", [hit("c", 10.0), hit("a", 5.0)], 3)  # ended before its depth: b holds no query word
    got = {h.id: h.score for h in fuse("", [dense, text], 3, weight=0.5)}
    # dense by (s + 1) / (0.8 + 1), text by s / 10; b is absent from a finished text ranking: 0
    assert got["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)
    assert got["b"] == pytest.approx(0.5 * 1.6 / 1.8)
    assert got["c"] == pytest.approx(0.5 * 1.2 / 1.8 + 0.5 * 1.0)
    assert [h.id for h in fuse("", [dense, text], 3, weight=0.5)] == ["c", "a", "b"]


def test_a_chunk_missing_from_a_full_ranking_counts_as_its_last() -> None:
    dense = Ranking("dense", [hit("a", 0.9), hit("b", 0.5)], 2)
    text = Ranking("text", [hit("b", 4.0), hit("c", 2.0)], 2)  # as deep as asked: a may score below 2.0
    got = {h.id: h.score for h in fuse("", [dense, text], 3, weight=0.5)}
    assert got["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)  # the text ranking's last: 2 / 4
    assert got["c"] == pytest.approx(0.5 * 1.5 / 1.9 + 0.5 * 0.5)  # the dense ranking's last: (0.5 + 1) / 1.9


def test_chunk_holding_every_rare_word_is_never_outranked_by_one_holding_none() -> None:
    pool = [hit(f"d{i}", 0.9 - i / 100, f"the rule about indents, number {i}") for i in range(60)]
    rare = hit("x", 0.1, "The zebra-otter rule: never share one ffi_cif between threads.")
    dense = Ranking("dense", pool, 60)
    text = Ranking("text", [*[hit(h.id, 3.0, h.text) for h in pool[:40]], hit("x", 2.0, rare.text)], 100)
    assert rare_words("zebra-otter rule", [h.text for h in [*pool, rare]]) == ["zebra-otter"]
    top = fuse("zebra-otter rule", [dense, text], 1)
    assert top[0].id == "x" and top[0].score > 1.0
    without = fuse("zebra-otter rule", [dense, text], 1, share=None)
    assert without[0].id != "x"  # the signal is what puts it first


def test_words_held_by_many_candidates_are_not_rare() -> None:
    texts = [f"information retrieval study {i}" for i in range(100)] + ["a thesaurus for retrieval"]
    assert rare_words("retrieval thesaurus", texts) == ["thesaurus"]
    assert rare_words("the information", texts) == []  # a stop word, and a word every candidate holds


def test_depth_is_at_least_top_k() -> None:
    assert depth(1) == depth(10) >= 10
    assert depth(5000) == 5000
