"""What the parts of bench/extract.py share: labels, texts, the model and its card, and shoal's windows."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

LABELS = ["city", "animal", "person"]
THRESHOLD = 0.5
MODEL_ID = "bench/gliner"


def make_texts(n: int, window: int, seed: int = 0) -> list[str]:
    """90% of 5-60 words, 10% of 1.5-4 windows, from the tests' vocabulary, with some punctuation."""
    from tests.helpers import WORDS

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = rnd.randint(int(1.5 * window), 4 * window) if i % 10 == 9 else rnd.randint(5, 60)
        words = [rnd.choice(WORDS) for _ in range(k)]
        for _ in range(k // 12):
            words[rnd.randrange(k)] += rnd.choice([",", ".", "!"])
        out.append(" ".join(words))
    return out


def make_model(tmp: Path, size: dict[str, int], window: int, overlap: int) -> tuple[Path, Path]:
    """A random-weight GLiNER (`size`: hidden, layers, intermediate, head) saved by GLiNER's own save_pretrained,
    and a card folder serving it as MODEL_ID (windows of `window` words sharing `overlap`; a 16,384-token batch
    budget)."""
    from tests.extract_support import gliner_card
    from tests.tiny_gliner import make_tiny_gliner

    folder = make_tiny_gliner(tmp / "gliner", max_len=window, seed=1, **size)
    cards = gliner_card(folder, tmp / "cards", MODEL_ID, overlap_words=overlap)
    card = cards / f"{MODEL_ID.replace('/', '_')}.yaml"
    card.write_text(card.read_text().replace("max_batch_tokens: 4096", "max_batch_tokens: 16384"))
    return folder, cards


def windows_of(model: Any, texts: list[str]) -> tuple[list[str], list[list[str]], list[int]]:
    """The windows shoal runs for these texts with LABELS: as text spans, as word lists, and the indices of
    the texts that fit one window."""
    from engine.worker.extraction.windows import plan_windows

    room = model.max_tokens - model.prompt_tokens(LABELS)
    spans: list[str] = []
    rows: list[list[str]] = []
    single: list[int] = []
    for i, text in enumerate(texts):
        words = model.words(text)
        counts = model.token_counts([w for w, _, _ in words])
        ranges = plan_windows(counts, model.window_words, model.overlap_words, room)
        spans += [text[words[r.first][1] : words[r.last - 1][2]] for r in ranges]
        rows += [[w for w, _, _ in words[r.first : r.last]] for r in ranges]
        single += [i] if len(ranges) == 1 else []
    return spans, rows, single
