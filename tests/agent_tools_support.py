"""Shared helpers of the agent-tools tests: the example data, hierarchical F1, generated taxonomies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import REPO, WORDS

PRODUCTS = REPO / "examples" / "taxonomy" / "products.yaml"
LABELLED = REPO / "examples" / "taxonomy" / "labelled.jsonl"
NO_LEAF = REPO / "examples" / "taxonomy" / "no_leaf.jsonl"
DOCUMENTS = REPO / "examples" / "context_filter" / "documents.json"
QUESTIONS = REPO / "examples" / "context_filter" / "questions.jsonl"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ancestors_and_self(label: str) -> set[str]:
    """'A > B > C' -> {'A', 'A > B', 'A > B > C'} (the root, '', contributes nothing)."""
    parts = label.split(" > ") if label else []
    return {" > ".join(parts[: k + 1]) for k in range(len(parts))}


def hierarchical_f1(predicted: list[str], gold: list[str]) -> float:
    """Kiritchenko's hF1: precision and recall over the predicted and true labels augmented with ancestors."""
    overlap = sum(len(ancestors_and_self(p) & ancestors_and_self(g)) for p, g in zip(predicted, gold, strict=True))
    n_pred = sum(len(ancestors_and_self(p)) for p in predicted)
    n_gold = sum(len(ancestors_and_self(g)) for g in gold)
    precision, recall = overlap / max(n_pred, 1), overlap / max(n_gold, 1)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def generated_tree(departments: int, categories: int, leaves: int) -> dict[str, Any]:
    """A nested taxonomy of departments x categories x leaves named with words the tiny tokenizer knows."""
    w = [x for x in WORDS if len(x) > 2]

    def word(k: int) -> str:
        return w[k % len(w)]

    return {
        "name": "generated",
        "children": [
            {
                "name": f"{word(d)} department {d}",
                "children": [
                    {
                        "name": f"{word(d + c)} {word(c)} category {c}",
                        "children": [
                            {
                                "name": f"{word(7 * d + 3 * c + i)} {word(i)} item {i}",
                                "description": f"{word(c + i)} things",
                            }
                            for i in range(leaves)
                        ],
                    }
                    for c in range(categories)
                ],
            }
            for d in range(departments)
        ],
    }


def classify_over_mcp(taxonomy: Path, body: dict[str, Any]) -> dict[str, Any]:
    """classify_taxonomy called through `shoal mcp --taxonomy support=TAXONOMY` over stdio."""
    import asyncio
    import sys

    from mcp import Client, StdioServerParameters

    from tests.test_agent_tools_mcp import ENV

    async def call() -> dict[str, Any]:
        args = ["-m", "shoal.cli", "mcp", "--taxonomy", f"support={taxonomy}"]
        params = StdioServerParameters(command=sys.executable, args=args, env=ENV, cwd=str(REPO))
        async with Client(params, read_timeout_seconds=300) as client:
            out = await client.call_tool("classify_taxonomy", body)
            assert not out.is_error
            return dict(out.structured_content)

    return asyncio.run(call())
