"""A tiny random-weight GLiNER built offline: GLiNERConfig over a tiny local BERT folder, GLiNER.from_config,
save_pretrained (which writes pytorch_model.bin, a pickle, as GLiNER's own checkpoints do).

The backbone folder is deleted once the model is saved, so the checkpoint must stand alone: nothing may
reach back to it, or to the hub, for a config or a tokenizer.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from tests.tiny_models import VOCAB, write_tokenizer

MAX_POSITIONS = 256


def make_backbone(
    folder: Path, seed: int = 0, hidden: int = 32, layers: int = 2, intermediate: int | None = None
) -> Path:
    """A tiny BERT (2 layers, 32 wide, feed-forward 2x wide unless told) with the tests' WordPiece tokenizer and a
    tokenizer_config.json."""
    from transformers import BertConfig, BertModel

    write_tokenizer(folder)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=intermediate or 2 * hidden,
        max_position_embeddings=MAX_POSITIONS,
    )
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(str(folder))
    tok_config = {"tokenizer_class": "BertTokenizer", "model_max_length": MAX_POSITIONS, "do_lower_case": True}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return folder


def make_tiny_gliner(
    folder: Path,
    *,
    span_mode: str = "markerV0",
    bi_encoder: bool = False,
    max_len: int = 64,
    seed: int = 0,
    spread: float = 0.1,
    rnn_layers: int = 1,
    max_width: int = 12,
    hidden: int = 32,
    layers: int = 2,
    head: int | None = None,
    intermediate: int | None = None,
) -> Path:
    """Save a random-weight GLiNER into `folder`: span (markerV0) or token level, uni- or bi-encoder.

    `spread` is the standard deviation of noise added to every weight, so that scores spread out around the
    0.5 threshold instead of all sitting at 0.50. `rnn_layers` 0 drops GLiNER's word-level LSTM (much faster
    on long inputs, for tests that only need volume), as does a smaller `max_width` (longest entity, in words).
    `hidden`, `layers` and `intermediate` size the encoder (benchmarks use a larger one, so the model's work
    dominates); `head` is GLiNER's own width (span and label layers; default `hidden`; gliner's default 512).
    """
    from gliner import GLiNER, GLiNERConfig

    work = folder.parent / f"{folder.name}-backbone"
    backbone = make_backbone(work, seed, hidden, layers, intermediate)
    extra: dict[str, Any] = {"labels_encoder": str(backbone)} if bi_encoder else {}
    config = GLiNERConfig(
        model_name=str(backbone),
        hidden_size=head or hidden,
        max_len=max_len,
        span_mode=span_mode,
        dropout=0.0,
        num_rnn_layers=rnn_layers,
        max_width=max_width,
        **extra,
    )
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GLiNER.from_config(config, backbone_from_pretrained=True, local_files_only=True)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * spread)
    model.save_pretrained(folder)
    shutil.rmtree(work)
    return folder


def reference(folder: Path) -> Any:
    """GLiNER's own loader over the saved folder (the parity reference), offline."""
    from gliner import GLiNER

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GLiNER.from_pretrained(str(folder), local_files_only=True)
    return model.eval()
