"""Classify a few texts into the example product taxonomy, in-process (no server), and print each answer.

    python examples/taxonomy/classify.py ["some product text" ...]

The first run embeds the 400 node descriptions once (they are cached by the taxonomy's hash for the rest of
the process); each answer shows the deepest confident node, the score and confidence at each level of the
best path, and the runner-up leaves.
"""

from __future__ import annotations

import sys
from pathlib import Path

import agent_tools
from agent_tools.config import ToolSettings

HERE = Path(__file__).parent
TEXTS = [
    "waterproof Bluetooth speaker for the beach",
    "size 4 nappies, 120 pack",
    "wooden wardrobe with sliding doors",  # furniture, but the taxonomy has no wardrobe leaf
    "please reset my password",  # nothing in this shop: zero-shot, the answer is still its nearest node
]


def main() -> None:
    settings = ToolSettings(taxonomies={"products": HERE / "products.yaml"})
    texts = sys.argv[1:] or TEXTS
    result = agent_tools.classify_taxonomy(texts=texts, taxonomy="products", settings=settings)
    for text, r in zip(texts, result["results"], strict=True):
        print(f"\n{text!r} -> {r['label'] or '(no confident category)'}")
        for level in r["levels"]:
            print(f"    {level['label']:<55} score {level['score']:.3f}  confidence {level['confidence']:.3f}")
        others = ", ".join(f"{a['label']} ({a['confidence']:.2f})" for a in r["alternatives"])
        print(f"    runners-up: {others}")
    print(f"\nmodel calls: {result['model_calls']}")


if __name__ == "__main__":
    main()
