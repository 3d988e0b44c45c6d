"""Context-filter quality: is the answer kept, and at what share of the words, on labelled question sets.

A set is a JSON file of documents (`{"documents": [{"title", "passages": [...]}]}`) and a JSONL file of
questions (`{"question", "document", "answer_passage", "answer"}`, the answer a substring of its passage).
Per set, in the same run: plain cosine ranking (the best passage only; the former defaults, a fixed margin
of 0.1 on the cosine and 0.15 between sentences; the adaptive cut on the cosine alone) beside
`filter_context` with its defaults: answer passage kept, share of the words kept, and with
`sentences=true`, the answer sentence kept (the answer string survives pruning). The defaults were
chosen on examples/context_filter; bench/data/context/ holds a technical set they were not chosen on, and
bench/data/context_stdlib/ a second one, written after the defaults were set and measured once they were.
bench/context_long.py adds long pages (bench/data/context_long/: 5,000+ tokens each, given as one text)
beside plain cosine top-k at the same token budget.

    .venv/bin/python bench/context_quality.py
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SETS = {
    "examples (chose the defaults)": ROOT / "examples" / "context_filter",
    "technical docs": ROOT / "bench" / "data" / "context",
    "Python standard library": ROOT / "bench" / "data" / "context_stdlib",
}


def load(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = json.loads((folder / "documents.json").read_text())["documents"]
    questions = [json.loads(x) for x in (folder / "questions.jsonl").read_text().splitlines() if x.strip()]
    return docs, questions


async def evaluate(engine: Any, folder: Path, options: dict[str, Any]) -> dict[str, float]:
    from agent_tools.backend import ModelBackend
    from agent_tools.context_filter import FilterOptions, filter_context

    docs, questions = load(folder)
    kept = words = total = sentence_kept = 0
    for q in questions:
        passages = docs[q["document"]]["passages"]
        opts = FilterOptions(**options)
        r = await filter_context(q["question"], passages, None, ModelBackend(engine), MINILM, opts)
        kept += q["answer_passage"] in [p["index"] for p in r["passages"]]
        words += r["tokens_after"]
        total += r["tokens_before"]
        s = await filter_context(
            q["question"], passages, None, ModelBackend(engine), MINILM, FilterOptions(**options, sentences=True)
        )
        sentence_kept += q["answer"].lower() in s["text"].lower()
    n = len(questions)
    return {
        "questions": n,
        "answer_passage_kept": kept / n,
        "words_kept": words / total,
        "answer_sentence_kept": sentence_kept / n,
    }


async def run() -> dict[str, Any]:
    from bench import float32_settings
    from bench.context_long import run_long
    from engine.runtime import AsyncEngine

    methods: dict[str, dict[str, Any]] = {
        "cosine, best passage": {"keep_mass": None, "max_passages": 1, "lexical_weight": 0.0},
        "former defaults": {"keep_mass": None, "margin": 0.1, "lexical_weight": 0.0, "sentence_margin": 0.15},
        "adaptive, cosine only": {"lexical_weight": 0.0},
        "filter_context defaults": {},
    }
    out: dict[str, Any] = {}
    async with AsyncEngine(float32_settings()) as engine:
        for name, folder in SETS.items():
            if (folder / "questions.jsonl").exists():
                out[name] = {m: await evaluate(engine, folder, o) for m, o in methods.items()}
        out["long pages"] = await run_long(engine)
    return out


def report_long(rows: Any) -> None:
    from bench.context_long import report_long as long_report

    long_report(rows)


def report(result: dict[str, Any]) -> None:
    for name, rows in result.items():
        if name == "long pages":
            report_long(rows)
            continue
        print(name)
        for method, r in rows.items():
            print(
                f"  {method:<26} answer passage {r['answer_passage_kept']:.3f}  words {r['words_kept']:.3f}"
                f"  answer sentence (sentences=true) {r['answer_sentence_kept']:.3f}  ({r['questions']} questions)"
            )


def main() -> None:
    result = asyncio.run(run())
    report(result)
    out = ROOT / "bench" / "results" / "context_quality.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
