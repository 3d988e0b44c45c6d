"""XLM-RoBERTa (bge-m3, multilingual-e5-large, jina-reranker-v2): BERT whose positions start at padding_idx + 1."""

from __future__ import annotations

from typing import Any

from engine.arch import bert, flash_names
from engine.arch.heads import ClassifierHead, MLMHead


def config(cfg: dict[str, Any]) -> bert.BertConfig:
    """RoBERTa numbers real tokens' positions from pad_token_id + 1 (position 0..pad are never used)."""
    c = bert.BertConfig.from_dict(cfg)
    c.position_offset = int(cfg.get("pad_token_id", 1)) + 1
    return c


def build(cfg: dict[str, Any]) -> bert.Bert:
    return bert.Bert(config(cfg))


def classifier(cfg: dict[str, Any]) -> ClassifierHead:
    """XLMRobertaForSequenceClassification: <s> -> dense -> tanh -> out_proj (bge-reranker-v2-m3)."""
    return ClassifierHead(int(cfg["hidden_size"]), bert.num_labels(cfg), "cls", "tanh")


def mlm(cfg: dict[str, Any]) -> MLMHead:
    """XLMRobertaForMaskedLM: lm_head (dense, gelu, layer_norm, decoder tied to word embeddings)."""
    c = config(cfg)
    return MLMHead(c.hidden_size, c.vocab_size, "gelu", c.layer_norm_eps)


HEADS = {"classifier": classifier, "mlm": mlm}
TOKEN_EMBEDDING = bert.TOKEN_EMBEDDING
# Hugging Face names, and flash-attn BERT names (Jina's fork: emb_ln, mixer.Wqkv, ...; see flash_names)
HF_RENAMES = [(r"^roberta\.", ""), *flash_names.FLASH_RENAMES, *bert.HF_RENAMES]
CONVERT = flash_names.split_wqkv  # a fused Wqkv (flash-attn layout) becomes query, key, value
HF_IGNORED = [r"^(roberta\.)?pooler\.", r"^lm_head\.", r"^classifier\.", r"position_ids$"]
HF_HEAD_RENAMES: dict[str, list[tuple[str, str]]] = {
    "classifier": [(r"^classifier\.dense\.", "dense."), (r"^classifier\.out_proj\.", "out.")],
    "mlm": [
        (r"^lm_head\.dense\.", "dense."),
        (r"^lm_head\.layer_norm\.", "norm."),
        (r"^lm_head\.decoder\.", "decoder."),
        (r"^lm_head\.bias$", "decoder.bias"),
    ],
}
