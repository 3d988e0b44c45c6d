"""Context filter on long pages (5,000+ tokens): is the answer kept, beside plain cosine top-k at the same budget.

A set is a JSON file of whole pages (`{"documents": [{"title", "source", "text"}]}`) and a JSONL file of
questions (`{"question", "document", "answer"}`, the answer a verbatim phrase of its page). Each page goes to
`filter_context` as one `text` (split into passages, each scored with its Markdown heading path). Per
question, in the same run and over the same passages (`split_passages`):

- `filter_context` with its defaults (adaptive cut), and the cosine top-k baseline given the same number of
  tokens the filter kept for that question (best passages first while they fit);
- the same passages handed over as a list (no heading paths): what the headings add;
- `filter_context` with a fixed `token_budget` (the adaptive cut off) beside cosine top-k at that budget.

"answer kept" means the kept text holds the answer phrase (whitespace normalised). Used by
bench/context_quality.py; runs alone too:

    .venv/bin/python -m bench.context_long
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
LONG_SETS = {"Node.js API pages (long)": ROOT / "bench" / "data" / "context_long"}
BUDGETS = (400, 1000)


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


def cosine_top_k(scores: Any, tokens: list[int], budget: int) -> list[int]:
    """The best passages by cosine, best first, while they fit `budget` tokens (a shorter one may still fit)."""
    keep, used = [], 0
    for i in (-scores).argsort(kind="stable").tolist():
        if used + tokens[i] <= budget:
            keep.append(i)
            used += tokens[i]
    return sorted(keep)


async def evaluate_long(engine: Any, folder: Path) -> dict[str, dict[str, float]]:
    from agent_tools.backend import ModelBackend
    from agent_tools.context_filter import FilterOptions, filter_context
    from agent_tools.text import count_tokens, split_passages

    docs = json.loads((folder / "documents.json").read_text())["documents"]
    questions = [json.loads(x) for x in (folder / "questions.jsonl").read_text().splitlines() if x.strip()]
    backend = ModelBackend(engine)
    spans = [split_passages(d["text"]) for d in docs]
    tokens = [[count_tokens(s.text) for s in sp] for sp in spans]
    vectors = [await backend.embed(MINILM, [s.text for s in sp]) for sp in spans]
    rows: dict[str, list[tuple[bool, int]]] = {}

    def add(method: str, text: str, answer: str, used: int) -> None:
        rows.setdefault(method, []).append((_norm(answer) in _norm(text), used))

    for q in questions:
        d, answer = q["document"], q["answer"]
        passages = [s.text for s in spans[d]]
        query = (await backend.embed(MINILM, [q["question"]], is_query=True))[0]
        cos = vectors[d] @ query
        r = await filter_context(q["question"], None, docs[d]["text"], backend, MINILM, FilterOptions())
        add("filter_context defaults", r["text"], answer, r["tokens_after"])
        kept = cosine_top_k(cos, tokens[d], r["tokens_after"])
        add(
            "cosine top-k, same tokens", "\n\n".join(passages[i] for i in kept), answer, sum(tokens[d][i] for i in kept)
        )
        r = await filter_context(q["question"], passages, None, backend, MINILM, FilterOptions())
        add("defaults, no heading paths", r["text"], answer, r["tokens_after"])
        for budget in BUDGETS:
            opts = FilterOptions(keep_mass=None, token_budget=budget)
            r = await filter_context(q["question"], None, docs[d]["text"], backend, MINILM, opts)
            add(f"filter_context, {budget} tokens", r["text"], answer, r["tokens_after"])
            kept = cosine_top_k(cos, tokens[d], budget)
            add(f"cosine top-k, {budget} tokens", "\n\n".join(passages[i] for i in kept), answer, sum(tokens[d][i] for i in kept))  # fmt: skip
    page_tokens = sum(sum(tokens[q["document"]]) for q in questions)
    return {
        m: {
            "questions": len(v),
            "answer_kept": sum(k for k, _ in v) / len(v),
            "tokens_kept": sum(u for _, u in v) / len(v),
            "share_kept": sum(u for _, u in v) / page_tokens,
        }
        for m, v in rows.items()
    }


def report_long(result: dict[str, dict[str, dict[str, float]]]) -> None:
    for name, rows in result.items():
        print(name)
        for method, r in rows.items():
            print(
                f"  {method:<30} answer kept {r['answer_kept']:.3f}  tokens kept {r['tokens_kept']:7.1f}"
                f"  share of the page {r['share_kept']:.3f}  ({r['questions']} questions)"
            )


async def run_long(engine: Any) -> dict[str, dict[str, dict[str, float]]]:
    return {name: await evaluate_long(engine, folder) for name, folder in LONG_SETS.items()}


async def _main() -> None:
    from bench import float32_settings
    from engine.runtime import AsyncEngine

    async with AsyncEngine(float32_settings()) as engine:
        report_long(await run_long(engine))


if __name__ == "__main__":
    asyncio.run(_main())
