"""Vectors are normalised in one place: engine/model/heads.py (sentence vectors after Matryoshka truncation,
ColBERT token vectors); the worker's output shaping and zero-shot classes call it, never the maths itself."""

from __future__ import annotations

import re

import pytest
import torch

from engine.errors import InvalidInput
from engine.model.heads import sentence_vectors
from tests.helpers import REPO

CALL = re.compile(r"\b(l2_normalize|F\.normalize|torch\.nn\.functional\.normalize)\(")
HOME = {"engine/model/heads.py", "engine/arch/pooling.py"}  # the one caller, and where the maths is written
MEASURES = {"engine/residency/gate.py": "cosine of reference vs candidate rows: a quality measure, not an output"}


def test_only_the_heads_normalise() -> None:
    callers = {str(p.relative_to(REPO)) for p in (REPO / "engine").rglob("*.py") if CALL.search(p.read_text())}
    assert callers - HOME - set(MEASURES) == set(), "normalise through engine.model.heads.sentence_vectors"


def test_sentence_vectors_truncate_then_normalise() -> None:
    x = torch.tensor([[3.0, 4.0, 12.0], [1.0, 0.0, 0.0]])
    unit = sentence_vectors(x, 2, normalize=True)
    assert torch.allclose(unit, torch.tensor([[0.6, 0.8], [1.0, 0.0]]))  # the first 2 dims, then unit length
    assert torch.equal(sentence_vectors(x, None, normalize=False), x)
    assert torch.allclose(sentence_vectors(x, 3, normalize=True).norm(dim=1), torch.ones(2))
    for bad in (0, 4):
        with pytest.raises(InvalidInput, match="dimensions must be between 1 and 3"):
            sentence_vectors(x, bad, normalize=True)
