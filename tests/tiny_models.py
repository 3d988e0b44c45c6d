"""Tiny random-weight checkpoints of every family and head, built offline from transformers config classes.

Each maker saves a transformers checkpoint (safetensors) plus a WordPiece tokenizer.json into a folder
and returns the reference model in eval mode, so a test can compare our forward pass against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tests.helpers import WORDS

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
EXTRA = ["yes", "no", "capital", "relevant", "passage", "about", "<", ">", ":", "instruct", "document"]
VOCAB = (
    SPECIAL
    + WORDS
    + EXTRA
    + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    + list("abcdefghijklmnopqrstuvwxyz0123456789.,!?;")
)
PAD, CLS, SEP, MASK = 0, 2, 3, 4
# token ids of sequences of very different lengths (1 ... 70), all inside the vocabulary
LENGTHS = [1, 2, 7, 33, 70, 15]


def write_tokenizer(folder: Path) -> None:
    """A lower-casing WordPiece tokenizer ([CLS] a [SEP] b [SEP] with segment ids), saved as tokenizer.json.

    Built with `tokenizers` directly: transformers 5's BertTokenizerFast(vocab_file=...) ignores the file.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(VOCAB)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)]
    )
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(SPECIAL)
    tok.save(str(folder / "tokenizer.json"))


def random_ids(seed: int = 0, lengths: list[int] = LENGTHS) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(len(SPECIAL), len(VOCAB), (n,), generator=g).tolist() for n in lengths]


def _perturb(model: torch.nn.Module, seed: int) -> None:
    """Random weights with some spread everywhere (norm weights and biases too), so bugs show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def save(model: Any, folder: Path, seed: int = 0) -> Any:
    _perturb(model, seed)
    model.eval()
    write_tokenizer(folder)
    model.save_pretrained(str(folder), safe_serialization=True)
    return model


COMMON = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def bert_config(**kw: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(**{**COMMON, "max_position_embeddings": 128, **kw})


def xlmr_config(**kw: Any) -> Any:
    from transformers import XLMRobertaConfig

    # padding_idx 1 as in XLM-R, so real positions start at 2
    return XLMRobertaConfig(**{**COMMON, "max_position_embeddings": 130, "pad_token_id": 1, "type_vocab_size": 1, **kw})


def modernbert_config(**kw: Any) -> Any:
    from transformers import ModernBertConfig

    # a local window (8 tokens: 4 either side) far smaller than the longest test sequence (70)
    base = dict(COMMON, num_hidden_layers=4, local_attention=8, global_attn_every_n_layers=2, pad_token_id=PAD)
    return ModernBertConfig(
        **{**base, "cls_token_id": CLS, "sep_token_id": SEP, "bos_token_id": CLS, "eos_token_id": SEP, **kw}
    )


def qwen3_config(**kw: Any) -> Any:
    from transformers import Qwen3Config

    # GQA (2 KV heads for 4 query heads) and head_dim 16 != hidden / heads
    base = dict(COMMON, hidden_size=48, num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    return Qwen3Config(**{**base, "pad_token_id": PAD, "tie_word_embeddings": True, **kw})


def llama_config(**kw: Any) -> Any:
    from transformers import LlamaConfig

    base = dict(COMMON, num_key_value_heads=1, max_position_embeddings=256, rope_theta=500.0)
    return LlamaConfig(**{**base, "pad_token_id": PAD, **kw})


CONFIGS = {
    "bert": bert_config,
    "xlm_roberta": xlmr_config,
    "modernbert": modernbert_config,
    "qwen3": qwen3_config,
    "llama": llama_config,
}


def make(family: str, kind: str, folder: Path, seed: int = 0, **config: Any) -> Any:
    """Save a tiny `family` checkpoint of class `kind` ("Model", "ForSequenceClassification", "ForMaskedLM",
    "ForCausalLM") into folder; return the reference model."""
    import transformers

    prefix = {
        "bert": "Bert",
        "xlm_roberta": "XLMRoberta",
        "modernbert": "ModernBert",
        "qwen3": "Qwen3",
        "llama": "Llama",
    }
    cls = getattr(transformers, prefix[family] + kind)
    torch.manual_seed(seed)
    cfg = CONFIGS[family](**config)
    cfg._attn_implementation = "eager"
    model = cls(cfg, add_pooling_layer=False) if (family == "bert" and kind == "Model") else cls(cfg)
    return save(model, folder, seed)


def write_card(folder: Path, card: dict[str, Any]) -> Path:
    """A YAML model card in `folder` (an extra catalogue directory)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    name = card["id"].replace("/", "_")
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(card, default=str))))
    return path
