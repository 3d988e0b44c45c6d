"""Context filtering with the real MiniLM: the answer-bearing passage survives while most tokens go; order,
budgets, thresholds, sentence pruning, one long text split into passages, and an empty passage list."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import agent_tools
from tests.agent_tools_support import DOCUMENTS, QUESTIONS, read_jsonl


def triples() -> list[tuple[str, list[str], int, str]]:
    """(question, the passages of its document, index of the answer-bearing passage, the answer phrase)."""
    docs = json.loads(DOCUMENTS.read_text())["documents"]
    return [
        (q["question"], docs[q["document"]]["passages"], q["answer_passage"], q["answer"])
        for q in read_jsonl(QUESTIONS)
    ]


def run(engine: Any, **arguments: Any) -> dict[str, Any]:
    return agent_tools.filter_context(client=engine, **arguments)


@pytest.mark.slow
def test_answer_passage_kept_while_tokens_drop(engine: Any) -> None:
    data = triples()
    assert len(data) >= 50
    kept = before = after = 0
    pruned_kept = pruned_after = 0
    for question, passages, answer, phrase in data:
        r = run(engine, query=question, passages=passages)
        kept += answer in [p["index"] for p in r["passages"]]
        before += r["tokens_before"]
        after += r["tokens_after"]
        s = run(engine, query=question, passages=passages, sentences=True)
        pruned_kept += phrase in s["text"]
        pruned_after += s["tokens_after"]
    keep_rate, drop = kept / len(data), 1 - after / before
    print(
        f"\ncontext filter ({len(data)} questions, MiniLM similarity, defaults):"
        f" answer passage kept {keep_rate:.3f}, tokens {before} -> {after} (drop {drop:.3f});"
        f" with sentence pruning: answer kept {pruned_kept / len(data):.3f}, drop {1 - pruned_after / before:.3f}"
    )
    assert keep_rate >= 0.95
    assert drop >= 0.5
    assert pruned_after < after  # sentence pruning cuts more ...
    assert pruned_kept / len(data) >= 0.85  # ... and mostly keeps the sentence that answers


def test_order_budget_threshold_and_limits(engine: Any) -> None:
    question, passages, answer, _ = triples()[0]
    loose = run(engine, query=question, passages=passages, margin=None)  # no margin: every passage is kept
    assert [p["index"] for p in loose["passages"]] == list(range(len(passages)))
    scores = {p["index"]: p["score"] for p in loose["passages"]}
    ranked = sorted(scores, key=lambda i: -scores[i])
    budget = loose["passages"][answer]["tokens"] + 10
    r = run(engine, query=question, passages=passages, margin=None, token_budget=budget)
    indices = [p["index"] for p in r["passages"]]
    assert indices == sorted(indices) and answer in indices  # original order, best first into the budget
    assert r["tokens_after"] <= budget and r["tokens_after"] == sum(p["tokens"] for p in r["passages"])
    top3 = run(engine, query=question, passages=passages, margin=None, max_passages=3)
    assert [p["index"] for p in top3["passages"]] == sorted(ranked[:3])
    none = run(engine, query=question, passages=passages, threshold=0.99)
    assert none["kept"] == 0 and none["tokens_after"] == 0 and none["text"] == "" and none["dropped"] == len(passages)
    assert r["scorer"] == "embedding:sentence-transformers/all-MiniLM-L6-v2"


def test_one_long_text_is_split_into_passages(engine: Any) -> None:
    docs = json.loads(DOCUMENTS.read_text())["documents"]
    text = f"# {docs[2]['title']}\n\n" + "\n\n".join(docs[2]["passages"])
    r = run(engine, query="What is the mileage rate for using my own car?", text=text, passage_tokens=80)
    assert r["kept"] >= 1 and "45 pence per mile" in r["text"]
    assert r["tokens_before"] > 3 * r["tokens_after"]
    for p in r["passages"]:
        assert text[p["start"] : p["end"]] == p["text"]


def test_empty_passage_list_is_a_correct_empty_result(engine: Any) -> None:
    r = run(engine, query="anything", passages=[])
    assert r["passages"] == [] and r["tokens_before"] == r["tokens_after"] == 0 and r["reduction"] == 0.0
    assert r["model_calls"]["encode_requests"] == 0


def test_reranker_scores_when_one_is_named(engine: Any, tmp_path: Any) -> None:
    """A tiny random cross-encoder: the scores must be its sigmoid outputs and the call a score task."""
    from tests.tiny_models import make

    make("bert", "ForSequenceClassification", tmp_path / "ce", num_labels=1)
    r = run(
        engine,
        query="the red fish",
        passages=["a red fish", "the dog", "blue city"],
        rerank_model=str(tmp_path / "ce"),
        margin=None,
    )
    assert r["scorer"].startswith("reranker:") and r["model_calls"]["score_pairs"] == 3
    assert all(0.0 <= p["score"] <= 1.0 for p in r["passages"]) and r["kept"] == 3
    direct = engine.score(str(tmp_path / "ce"), "the red fish", ["a red fish", "the dog", "blue city"])
    want = {int(s["item_id"].split("-")[1]): s["score"] for s in direct["scores"]}
    assert np.allclose([p["score"] for p in r["passages"]], [want[i] for i in range(3)], atol=1e-5)
