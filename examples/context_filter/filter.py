"""Cut a document down to the passages (and sentences) that answer a question, in-process (no server).

    python examples/context_filter/filter.py ["question" [document-number]]

Prints the tokens before and after and the kept text, in its original order, for passage-level filtering
and with sentence pruning.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import agent_tools

HERE = Path(__file__).parent


def main() -> None:
    question = sys.argv[1] if len(sys.argv) > 1 else "What happens if every dock at the station is full?"
    doc = json.loads((HERE / "documents.json").read_text())["documents"][int(sys.argv[2]) if len(sys.argv) > 2 else 0]
    text = f"# {doc['title']}\n\n" + "\n\n".join(doc["passages"])
    for sentences in (False, True):
        r = agent_tools.filter_context(query=question, text=text, sentences=sentences)
        mode = "passages and sentences" if sentences else "passages"
        print(
            f"\n[{mode}] {r['tokens_before']} -> {r['tokens_after']} tokens ({r['reduction']:.0%} cut), scorer {r['scorer']}"
        )
        print(r["text"])


if __name__ == "__main__":
    main()
