"""Infer a model card from a local transformers / sentence-transformers checkpoint folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.catalogue.cards import ExtractSpec, ModelCard, ScoreSpec, SparseSpec, WeightSource
from engine.errors import ModelLoadFailed

FAMILY_BY_MODEL_TYPE = {
    "bert": "bert",
    "xlm-roberta": "xlm_roberta",
    "roberta": "xlm_roberta",
    "modernbert": "modernbert",
    "qwen3": "qwen3",
    "llama": "llama",
}
# A config without model_type (Jina's XLM-R fork: its AutoConfig is custom code, never run here) names
# its family through its class: the first prefix here (most specific first) architectures[0] starts with.
FAMILY_BY_CLASS_PREFIX = [
    ("XLMRoberta", "xlm_roberta"),
    ("Roberta", "xlm_roberta"),
    ("ModernBert", "modernbert"),
    ("Bert", "bert"),
    ("Qwen3", "qwen3"),
    ("Llama", "llama"),
]
DECODERS = ("qwen3", "llama")


def family_of(config: dict[str, Any]) -> tuple[str | None, str]:
    """(family or None, what the config names): from model_type, else from the first architecture class."""
    model_type = config.get("model_type")
    if model_type is not None:
        return FAMILY_BY_MODEL_TYPE.get(str(model_type)), repr(model_type)
    classes = config.get("architectures") or []
    first = str(classes[0]) if isinstance(classes, list) and classes else ""
    family = next((f for prefix, f in FAMILY_BY_CLASS_PREFIX if first.startswith(prefix)), None)
    return family, repr(first or None)


def read_json(path: Path, name: str | None = None) -> dict[str, Any] | list[Any] | None:
    """A JSON file's content (None when absent); errors name it as `name` (default: its path)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, OSError) as e:
        raise ModelLoadFailed(f"{name or path} is not valid JSON: {e}") from e


def read_object(path: Path, name: str | None = None) -> dict[str, Any]:
    """A JSON object file ({} when absent); anything else is a load failure naming the file."""
    data = read_json(path, name)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ModelLoadFailed(f"{name or path} is not a JSON object")
    return data


def _pooling_from_st(folder: Path, model_id: str) -> tuple[str | None, bool]:
    """Pooling mode and normalisation from a sentence-transformers modules.json, when present."""
    modules = read_json(folder / "modules.json", f"{model_id!r}: modules.json")
    if not isinstance(modules, list):
        return None, False
    pooling, normalize = None, False
    for module in modules:
        if not isinstance(module, dict):
            raise ModelLoadFailed(f"{model_id!r}: modules.json lists something that is not an object")
        kind = str(module.get("type", ""))
        if kind.endswith("Normalize"):
            normalize = True
        if kind.endswith("Pooling"):
            sub = str(module.get("path") or "1_Pooling")
            if not (folder / sub).resolve().is_relative_to(folder.resolve()):
                raise ModelLoadFailed(f"{model_id!r}: modules.json points outside the checkpoint folder")
            cfg = read_object(folder / sub / "config.json", f"{model_id!r}: {sub}/config.json")
            if cfg.get("pooling_mode_cls_token"):
                pooling = "cls"
            elif cfg.get("pooling_mode_lasttoken"):
                pooling = "last"
            elif cfg.get("pooling_mode_mean_tokens"):
                pooling = "mean"
            else:
                raise ModelLoadFailed(f"{model_id!r}: unsupported pooling in {sub}/config.json")
    return pooling, normalize


def gliner_card(folder: Path, model_id: str) -> ModelCard:
    """A card for a GLiNER checkpoint folder (gliner_config.json): entities, windows of the model's max_len."""
    config = read_object(folder / "gliner_config.json")
    encoder = config.get("encoder_config")
    positions = int(encoder.get("max_position_embeddings") or 512) if isinstance(encoder, dict) else 512
    return ModelCard(
        id=model_id,
        family="gliner",
        description=f"local GLiNER checkpoint {folder}",
        source=WeightSource(path=folder),
        tasks=["extract"],
        outputs=["entities"],
        max_seq_len=positions,
        extract=ExtractSpec(kind="gliner"),
        profiles={"default": {"max_batch_tokens": max(8192, positions)}},
    )


def nli_spec(config: dict[str, Any]) -> ExtractSpec | None:
    """Zero-shot classification by entailment when a classifier's labels name entailment and contradiction."""
    labels = {str(v).lower(): int(k) for k, v in (config.get("id2label") or {}).items()}
    if "entailment" in labels and "contradiction" in labels:
        return ExtractSpec(
            kind="nli", entailment_label=labels["entailment"], contradiction_label=labels["contradiction"]
        )
    return None


def infer_card(folder: Path, model_id: str) -> ModelCard:
    """Build a card for a checkpoint folder: family from config.json, pooling from modules.json. A config
    with missing fields or wrong types is the model's load failure (502), naming the model, not the folder."""
    if (folder / "gliner_config.json").is_file():
        return gliner_card(folder, model_id)
    try:
        return _infer(folder, model_id)
    except (KeyError, TypeError, ValueError, ValidationError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise ModelLoadFailed(f"{model_id!r}: config.json cannot describe a model ({what})") from None


def _infer(folder: Path, model_id: str) -> ModelCard:
    if (folder / "gliner_config.json").is_file():
        return gliner_card(folder, model_id)
    config = read_json(folder / "config.json", f"{model_id!r}: config.json")
    if not isinstance(config, dict):
        raise ModelLoadFailed(f"{model_id!r} has no config.json; it is not a transformers checkpoint")
    family, named = family_of(config)
    if family is None:
        raise ModelLoadFailed(f"{model_id!r}: architecture {named} is not supported yet")
    pooling, normalize = _pooling_from_st(folder, model_id)
    st_cfg = read_object(folder / "sentence_bert_config.json", f"{model_id!r}: sentence_bert_config.json")
    positions = int(config.get("max_position_embeddings", 512))
    if family == "xlm_roberta":
        positions -= int(config.get("pad_token_id", 1)) + 1
    max_len = min(int(st_cfg.get("max_seq_length") or positions), positions, 8192)
    if max_len < 1:
        raise ValueError(f"max_position_embeddings gives a maximum length of {max_len}")
    budget = max(8192, max_len)
    # the head follows the checkpoint's class: a classifier scores pairs, a masked LM is a SPLADE encoder
    arch = " ".join(str(a) for a in (config.get("architectures") or []))
    tasks, outputs, score, sparse, extract = ["encode"], ["dense"], None, None, None
    if "ForSequenceClassification" in arch:
        tasks, outputs, score = ["score"], ["score"], ScoreSpec(kind="classifier")
        extract = nli_spec(config)
        tasks += ["extract"] if extract is not None else []
    elif "ForMaskedLM" in arch and pooling is None:
        outputs, sparse = ["sparse"], SparseSpec(kind="splade", vocab_size=int(config["vocab_size"]))
    return ModelCard(
        id=model_id,
        family=family,
        description=f"checkpoint folder {model_id}",
        source=WeightSource(path=folder),
        tasks=tasks,
        outputs=outputs,
        dense_dim=int(config["hidden_size"]),
        pooling=pooling or ("last" if family in DECODERS else "cls"),
        normalize=normalize,
        max_seq_len=max_len,
        truncate=True,
        score=score,
        sparse=sparse,
        extract=extract,
        profiles={"default": {"max_batch_tokens": budget}},
    )
