"""Cross-encoder heads against transformers: *ForSequenceClassification logits and Qwen3-Reranker yes/no.

Pairs are tokenised by our engine; the reference model reads the very same ids (and segment ids), one
pair at a time, and its logits must match our packed scores within 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.catalogue.cards import ModelCard, ScoreSpec
from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from engine.tasks.task import Task
from engine.worker.handlers.score import score_inputs
from tests import task_support
from tests.task_support import run
from tests.tiny_models import make

QUERY = "the capital of france"
DOCS = ["paris is the capital of france", "a", "the dog and the cat " * 8, "london is in england", "blue"]


def score_task(model: PackedModel, query: str = QUERY, docs: list[str] = DOCS, **body: object) -> Task:
    return task_support.score_task(model.card, query, docs, **body)


def scores_by_item(result: dict) -> list[float]:
    by_id = {s["item_id"]: s["score"] for s in result["scores"]}
    return [by_id[f"d{i}"] for i in range(len(by_id))]


CLASSIFIERS = [("bert", {}), ("xlm_roberta", {}), ("modernbert", {}), ("modernbert", {"classifier_pooling": "mean"})]
CLASSIFIERS += [("qwen3", {}), ("llama", {})]


@pytest.mark.parametrize(("family", "config"), CLASSIFIERS)
def test_classifier_logits_match(family: str, config: dict, tmp_path: Path) -> None:
    ref = make(family, "ForSequenceClassification", tmp_path, num_labels=1, **config)
    card = Catalogue().get(str(tmp_path))
    assert card.tasks == ["score"] and card.score is not None and card.score.kind == "classifier"
    model = load_model(card.model_copy(update={"score": ScoreSpec(kind="classifier", activation="none")}))
    task = score_task(model)
    result = run(model, task, 4096, 64)
    got = scores_by_item(result)
    for enc, value in zip(score_inputs(model, task), got, strict=True):
        kwargs = {"input_ids": torch.tensor([enc.ids])}
        if enc.type_ids is not None:
            kwargs["token_type_ids"] = torch.tensor([enc.type_ids])
        with torch.no_grad():
            want = ref(**kwargs).logits[0, 0].item()
        assert abs(value - want) <= 1e-4, (family, value, want)
    ranks = [s["item_id"] for s in result["scores"]]
    assert ranks == sorted(ranks, key=lambda i: -got[int(i[1:])])  # sorted by descending score, ranks 0..n-1
    assert [s["rank"] for s in result["scores"]] == list(range(len(DOCS))) and result["query_id"] == "q"


def test_bert_pairs_use_segment_ids(tmp_path: Path) -> None:
    make("bert", "ForSequenceClassification", tmp_path, num_labels=1)
    model = load_model(Catalogue().get(str(tmp_path)))
    [enc] = model.encode_pairs([("a b", "c")], truncate=True)
    assert enc.type_ids == [0, 0, 0, 0, 1, 1]


def test_multi_label_and_sigmoid(tmp_path: Path) -> None:
    """Two labels: relevance is the softmax probability of the last label; one label: sigmoid of the logit."""
    ref = make("bert", "ForSequenceClassification", tmp_path, num_labels=2)
    model = load_model(Catalogue().get(str(tmp_path)))
    task = score_task(model)
    result = run(model, task, 4096, 64)
    for enc, value in zip(score_inputs(model, task), scores_by_item(result), strict=True):
        with torch.no_grad():
            logits = ref(input_ids=torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])).logits[0]
        assert abs(value - torch.softmax(logits, -1)[1].item()) <= 1e-5


def yes_no_card(folder: Path) -> ModelCard:
    return ModelCard(
        id="tiny-qwen3-reranker",
        family="qwen3",
        source={"path": folder},
        tasks=["score"],
        outputs=["score"],
        pooling="last",
        max_seq_len=64,
        score={
            "kind": "yes_no",
            "prefix": "instruct : ",
            "template": "{instruction} < {query} > document : {document}",
            "suffix": " ; yes or no ?",
            "instruction": "relevant passage",
        },
        profiles={"default": {"max_batch_tokens": 4096}},
    )


def test_qwen3_reranker_yes_no(tmp_path: Path) -> None:
    ref = make("qwen3", "ForCausalLM", tmp_path)
    model = load_model(yes_no_card(tmp_path))
    tok = model.tokenizer
    yes, no = tok.token_id("yes"), tok.token_id("no")
    # the head shares the (tied) embedding matrix rather than copying it
    assert model.heads.modules["yes_no"].weight.data_ptr() == model.backbone.tokens.weight.data_ptr()
    task = score_task(model)
    result = run(model, task, 4096, 64)
    got = scores_by_item(result)
    for doc, enc, value in zip(DOCS, score_inputs(model, task), got, strict=True):
        body = tok.plain([f"relevant passage < {QUERY} > document : {doc}"])[0]
        prefix, suffix = tok.plain(["instruct : ", " ; yes or no ?"])
        assert enc.ids == (prefix + body + suffix)[: len(enc.ids)]
        assert enc.ids[-len(suffix) :] == suffix and len(enc.ids) <= 64  # the middle is what gets truncated
        with torch.no_grad():
            logits = ref(input_ids=torch.tensor([enc.ids])).logits[0, -1]
        want = torch.softmax(torch.stack([logits[no], logits[yes]]), 0)[1].item()
        assert abs(value - want) <= 1e-5


def test_request_instruction_overrides_card(tmp_path: Path) -> None:
    make("qwen3", "ForCausalLM", tmp_path)
    model = load_model(yes_no_card(tmp_path))
    a = score_inputs(model, score_task(model, docs=["x"]))[0].ids
    b = score_inputs(model, score_task(model, docs=["x"], instruction="document about paris"))[0].ids
    assert a != b
