"""GGUF -> safetensors: dequantise a llama.cpp checkpoint once into a folder the loader reads.

The loader only reads safetensors (no pickles, no quantised formats), so a GGUF file is converted ahead of
time: transformers reads and dequantises it (with the `gguf` package, un-permuting llama.cpp's Q/K rotary
layout), and we write config.json, model.safetensors and tokenizer.json beside each other.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.errors import ModelLoadFailed


def gguf_to_checkpoint(gguf_file: Path, out: Path) -> Path:
    """Write a float32 transformers checkpoint folder for `gguf_file` into `out`; returns `out`."""
    try:
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # pragma: no cover - transformers is a dependency
        raise ModelLoadFailed(f"converting GGUF needs transformers and gguf: {e}") from e
    folder, name = str(gguf_file.parent), gguf_file.name
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except Exception as e:  # noqa: BLE001 - any reader failure is a load failure with its reason
        raise ModelLoadFailed(f"could not read GGUF {gguf_file}: {type(e).__name__}: {e}") from e
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # shared with the token embeddings
    save_file(state, str(out / "model.safetensors"))
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    return out
