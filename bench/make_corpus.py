"""Build bench/data/passages.jsonl: ~2,000 English passages of 10-250 words from CPython's own docs.

Source text: the pydoc topics and standard-library docstrings of the running CPython (PSF License 2.0,
which permits redistribution). The output is deterministic for a given CPython version; the shipped
file was made with CPython 3.11.7 and is what the benchmarks read.
"""

from __future__ import annotations

import ast
import json
import random
import re
import sys
import sysconfig
from pathlib import Path

OUT = Path(__file__).parent / "data" / "passages.jsonl"
N_PASSAGES = 2000


def stdlib_docstrings() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc.split()) >= 8:
                    texts.append(doc)
    return texts


def sentences() -> list[str]:
    import pydoc_data.topics

    texts = list(pydoc_data.topics.topics.values()) + stdlib_docstrings()
    out = []
    for text in texts:
        flat = re.sub(r"\s+", " ", text).strip()
        out.extend(s for s in re.split(r"(?<=[.!?])\s+", flat) if len(s.split()) >= 3)
    return out


def main() -> None:
    rng = random.Random(1234)
    pool = sentences()
    passages = []
    i = 0
    while len(passages) < N_PASSAGES:
        target = rng.randint(10, 250)
        words: list[str] = []
        while len(words) < target:
            words.extend(pool[i % len(pool)].split())
            i += 1
        passages.append(" ".join(words[:target]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w") as f:
        for k, p in enumerate(passages):
            f.write(json.dumps({"id": f"p{k}", "text": p}) + "\n")
    print(f"wrote {len(passages)} passages from {len(pool)} sentences (CPython {sys.version.split()[0]}) to {OUT}")


if __name__ == "__main__":
    main()
