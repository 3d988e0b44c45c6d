"""The context filter on a long page keeps the passage that answers (a 6,900-token copy of the stores guide)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agent_tools
from agent_tools.context_filter import heading_paths
from agent_tools.text import split_passages

PAGE = Path(__file__).resolve().parent / "data" / "stores-page.md"  # docs/stores.md as it was, frozen
QUESTION = "What happens when a second process opens the same Qdrant Edge folder?"
ANSWER = "a second process opening the same folder fails at once with `STORE_LOCKED`"


@pytest.mark.parametrize("sentences", [False, True])
def test_long_page_keeps_the_answering_passage(engine: Any, sentences: bool) -> None:
    text = PAGE.read_text()
    r = agent_tools.filter_context(client=engine, query=QUESTION, text=text, sentences=sentences)
    assert r["tokens_before"] > 5000 and r["dropped"] > 50  # long, and most of it still goes
    assert ANSWER in r["text"], [p["text"][:80] for p in r["passages"]]


def test_heading_paths_follow_the_markdown_outline() -> None:
    text = "# Stores\n\nIntro.\n\n## LanceDB\n\nFast.\n\n## Qdrant Edge\n\nLocked.\n\n### Files\n\nA folder.\n"
    spans = split_passages(text, 3)
    paths = dict(zip((s.text for s in spans), heading_paths(text, spans), strict=True))
    assert paths["Locked."] == "Stores > Qdrant Edge" and paths["A folder."] == "Stores > Qdrant Edge > Files"
    assert paths["Fast."] == "Stores > LanceDB"
