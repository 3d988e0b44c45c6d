"""A loaded model: the narrow interface task handlers use, the loader, tokenizer, LoRA adapters, precision."""
