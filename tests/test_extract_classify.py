"""Zero-shot classification as `extract`: by embedding similarity with the real MiniLM on a labelled set, and by
NLI entailment with a tiny random cross-encoder, checked against transformers' zero-shot-classification pipeline."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MINILM
from tests.helpers import REPO

DATA = REPO / "tests" / "data" / "zero_shot_topics.jsonl"
NLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}


def labelled() -> list[dict[str, str]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def test_embedding_zero_shot_beats_the_majority_class_by_a_wide_margin(engine: Any) -> None:
    rows = labelled()
    labels = sorted({r["label"] for r in rows})
    assert len(rows) >= 100 and len(labels) >= 6
    results = engine.extract(MINILM, [r["text"] for r in rows], labels=labels)
    predicted = [r["classifications"][0]["label"] for r in results]
    accuracy = sum(p == r["label"] for p, r in zip(predicted, rows, strict=True)) / len(rows)
    majority = Counter(r["label"] for r in rows).most_common(1)[0][1] / len(rows)
    for r in results:  # single-label: every label, best first, scores a distribution over the labels
        scores = [c["score"] for c in r["classifications"]]
        assert len(scores) == len(labels) and scores == sorted(scores, reverse=True)
        assert abs(sum(scores) - 1) < 1e-5
    multi = engine.extract(MINILM, [r["text"] for r in rows], labels=labels, options={"multi_label": True})
    kept = [{c["label"] for c in r["classifications"]} for r in multi]
    recall = sum(r["label"] in k for r, k in zip(rows, kept, strict=True)) / len(rows)
    precision = sum(r["label"] in k for r, k in zip(rows, kept, strict=True)) / max(1, sum(len(k) for k in kept))
    print(
        f"\nzero-shot by MiniLM similarity, {len(rows)} texts, {len(labels)} labels: accuracy {accuracy:.3f} "
        f"(majority class {majority:.3f}); multi-label at the default threshold: recall {recall:.2f}, "
        f"precision {precision:.2f}"
    )
    assert accuracy >= majority + 0.5, f"accuracy {accuracy:.3f} vs majority baseline {majority:.3f}"
    assert recall >= 0.6 and precision >= 0.6


def test_label_descriptions_fill_the_template(engine: Any) -> None:
    descriptions = {"A": "football, tennis and other sports", "B": "recipes, baking and cooking"}
    texts = ["the striker scored a late winner", "whisk the eggs and fold in the flour"]
    results = engine.extract(MINILM, texts, labels=["A", "B"], options={"descriptions": descriptions})
    assert [r["classifications"][0]["label"] for r in results] == ["A", "B"]
    raw = engine.extract(MINILM, texts, labels=["A", "B"], options={"hypothesis_template": "{label}"})
    assert raw[0]["classifications"] != results[0]["classifications"]  # the template is what gets embedded


@pytest.fixture(scope="module")
def nli_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BertForSequenceClassification whose labels are entailment / neutral / contradiction."""
    from tests.tiny_models import make

    folder = tmp_path_factory.mktemp("nli") / "ce"
    make("bert", "ForSequenceClassification", folder, num_labels=3, id2label=NLI_LABELS,
         label2id={v: k for k, v in NLI_LABELS.items()}, seed=3)  # fmt: skip
    return folder


def zero_shot_pipeline(folder: Path) -> Any:
    """transformers' own zero-shot-classification pipeline over the same checkpoint and tokenizer."""
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast, pipeline

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"),
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    return pipeline("zero-shot-classification", model=model, tokenizer=tok)


@pytest.mark.parametrize("multi_label", [False, True])
def test_nli_matches_transformers_zero_shot_pipeline(nli_model: Path, engine: Any, multi_label: bool) -> None:
    texts = ["the cat sat in paris", "a model on a small server", "london is a city in england", "red green blue"]
    labels = ["city", "animal", "data", "colour"]
    template = "This example is {}."
    ref = zero_shot_pipeline(nli_model)
    options = {"multi_label": multi_label, "threshold": 0.0}
    got = engine.extract(str(nli_model), texts, labels=labels, options=options)  # card inferred: NLI labels
    for text, result in zip(texts, got, strict=True):
        want = ref(text, candidate_labels=labels, hypothesis_template=template, multi_label=multi_label)
        mine = {c["label"]: c["score"] for c in result["classifications"]}
        assert set(mine) == set(labels)
        for label, score in zip(want["labels"], want["scores"], strict=True):
            assert abs(mine[label] - score) < 1e-5, (text, label, mine[label], score)
        assert [c["label"] for c in result["classifications"]] == want["labels"]
