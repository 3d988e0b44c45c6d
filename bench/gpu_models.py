"""Models for bench/gpu.py, built offline: a reranker on the embedding model's encoder, a random GLiNER, cards.

No reranker or GLiNER weights can be fetched where the benchmark runs, and speed does not depend on what the
weights hold, only on their shapes: the reranker is the embedding model's own encoder under a seeded random
one-logit head; the GLiNER is random, with an encoder of GLiNER small's shape (6 layers, 768 wide) unless
`tiny`, over the test suite's small WordPiece vocabulary (so its texts come from that vocabulary too).
"""

from __future__ import annotations

import shutil
from pathlib import Path

RERANKER = "bench/reranker"
GLINER = "bench/gliner"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def tiny_embedder(folder: Path) -> Path:
    """A small random BERT saved as a sentence-transformers folder (the CPU smoke run's embedding model)."""
    import json

    from tests.helpers import make_tiny_bert

    config = {"hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 512}
    make_tiny_bert(folder, **config)
    pooling = {"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True}  # what sentence-transformers reads
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return folder


def reranker(model_dir: Path, folder: Path, cards: Path) -> str:
    """A cross-encoder card over `model_dir`'s encoder with a random classification head; returns its id."""
    import torch
    from transformers import BertForSequenceClassification

    from tests.tiny_models import write_card

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(str(model_dir), num_labels=1).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, folder / name)
    card = {"id": RERANKER, "family": "bert", "pooling": "cls", "max_seq_len": 512, "truncate": True}
    card |= {"source": {"path": str(folder)}, "tasks": ["score"], "outputs": ["score"]}
    card |= {"score": {"kind": "classifier", "activation": "sigmoid"}}
    write_card(cards, card | {"profiles": {"default": {"max_batch_tokens": 16384}}})
    return RERANKER


def gliner(folder: Path, cards: Path, tiny: bool) -> str:
    """A random GLiNER (span mode) and its card; returns its id."""
    from tests.extract_support import gliner_card
    from tests.tiny_gliner import make_tiny_gliner

    size = {} if tiny else {"hidden": 768, "layers": 6, "intermediate": 3072, "head": 512}
    make_tiny_gliner(folder, max_len=384, **size)
    gliner_card(folder, cards, model_id=GLINER)
    return GLINER


def gliner_texts(n: int, seed: int = 0) -> list[str]:
    """Texts of 20-120 words from the vocabulary the random GLiNER was built over."""
    from tests.extract_support import texts

    return texts(n, seed=seed, lo=20, hi=120)
