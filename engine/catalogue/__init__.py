"""The model catalogue: cards (YAML, validated), cards inferred from checkpoint folders, weight resolution."""
