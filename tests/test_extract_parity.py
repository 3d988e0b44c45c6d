"""GLiNER through shoal vs GLiNER's own predict_entities: same entities on short texts, nothing lost on long ones.

The checkpoints are tiny random-weight GLiNERs built offline (tests/tiny_gliner.py), saved by GLiNER's own
save_pretrained (pytorch_model.bin) and loaded through the catalogue and the gliner family's loader.
"""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ModelLoadFailed
from engine.model.gliner_runtime import GlinerModel
from engine.tasks.extract import extract_task, parse_extract
from engine.worker.extraction.windows import Found, WordRange, merge, plan_windows
from tests.extract_support import GLINER_ID, LABELS, VARIANTS, load_through_catalogue, texts
from tests.helpers import REPO, WORDS
from tests.task_support import SETTINGS, run
from tests.tiny_gliner import reference

SCORE_TOL = 1e-4  # batch padding moves scores in the 6th decimal


def extract(model: GlinerModel, items: list[str], **options: Any) -> list[list[dict[str, Any]]]:
    """Entities per item through the worker's handler table, every item in one task (shared batches)."""
    body = {"items": [{"text": t} for t in items], "params": {"labels": LABELS, "options": options}}
    task = extract_task(model.card, parse_extract(body), SETTINGS)
    return [item["entities"] for item in run(model, task, max_tokens=4096, max_items=64)["items"]]


def same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [(e["start"], e["end"], e["label"], e["text"]) for e in got] == [
        (e["start"], e["end"], e["label"], e["text"]) for e in want
    ]
    for g, w in zip(got, want, strict=True):
        assert abs(g["score"] - w["score"]) < SCORE_TOL


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.slow
def test_short_texts_match_predict_entities(variant: str, gliner_dirs: dict[str, Path]) -> None:
    """Many short texts in shared batches give exactly what predict_entities gives for each text alone."""
    folder = gliner_dirs[variant]
    threshold = VARIANTS[variant][1]
    model = load_through_catalogue(str(folder))  # a folder id: the card is inferred from gliner_config.json
    assert isinstance(model, GlinerModel) and model.card.family == "gliner"
    ref = reference(folder)
    items = texts(40, seed=1)
    for flat, multi in [(True, False), (False, False), (True, True)]:
        got = extract(model, items, threshold=threshold, flat_ner=flat, multi_label=multi)
        total = 0
        for text, ents in zip(items, got, strict=True):
            want = ref.predict_entities(text, LABELS, threshold=threshold, flat_ner=flat, multi_label=multi)
            same(ents, want)
            total += len(want)
        assert total >= 20, f"{variant}: the random model found only {total} entities; the comparison is empty"


def test_catalogue_card_loads_the_checkpoint(gliner_cards: Path, gliner_dirs: dict[str, Path]) -> None:
    """A YAML card (family gliner) resolves to the same checkpoint and the same entities."""
    model = load_through_catalogue(GLINER_ID, gliner_cards)
    assert isinstance(model, GlinerModel) and model.card.id == GLINER_ID
    ref = reference(gliner_dirs["span"])
    for text, ents in zip(texts(5, seed=2), extract(model, texts(5, seed=2)), strict=True):
        same(ents, ref.predict_entities(text, LABELS, threshold=0.5))


def test_long_text_keeps_the_last_window_and_original_offsets(gliner_dirs: dict[str, Path]) -> None:
    """A text 3x the window: no entity of the last window is lost, and every offset indexes the original text.

    What only the last window reads must come back exactly as predict_entities finds it in that window's text
    alone; what it shares with the previous window comes back, or loses to a better-scored overlapping
    entity of the previous window (the merge at the overlap)."""
    folder = gliner_dirs["span"]
    model = load_through_catalogue(str(folder))
    assert isinstance(model, GlinerModel)
    rnd = random.Random(3)
    text = "  ".join(rnd.choice(WORDS) for _ in range(3 * model.window_words))  # 3 windows' worth of words
    words = model.words(text)
    counts = model.token_counts([w for w, _, _ in words])
    windows = plan_windows(
        counts, model.window_words, model.overlap_words, model.max_tokens - model.prompt_tokens(LABELS)
    )
    assert len(windows) >= 3 and windows[-1].last == len(words)
    [got] = extract(model, [text])
    for e in got:
        assert text[e["start"] : e["end"]] == e["text"] and e["text"].strip() == e["text"]
    thirds = {min(2, 3 * e["start"] // len(text)) for e in got}
    assert thirds == {0, 1, 2}  # entities from the start, middle and end of the text

    last, prev = windows[-1], windows[-2]
    offset = words[last.first][1]
    word_at = {s: i for i, (_, s, _) in enumerate(words)}
    want = reference(folder).predict_entities(text[offset:], LABELS, threshold=0.5)
    only_last = 0
    for w in want:
        start, end = w["start"] + offset, w["end"] + offset
        e = next((g for g in got if (g["start"], g["end"], g["label"]) == (start, end, w["label"])), None)
        if word_at[start] >= prev.last:  # read by the last window alone
            only_last += 1
            assert e is not None, f"lost an entity of the last window: {w}"
            assert e["text"] == w["text"] and abs(e["score"] - w["score"]) < SCORE_TOL
        elif e is None:  # in the overlap: it may lose only to a better overlapping entity
            assert any(g["start"] < end and start < g["end"] and g["score"] >= w["score"] - SCORE_TOL for g in got), w
    assert only_last >= 3, "too few entities past the overlap for the test to mean anything"


def test_windows_cover_every_word_within_limits() -> None:
    counts = [1, 2, 1, 5, 1, 1, 3, 1, 1, 1] * 30 + [40] + [1] * 7  # one word longer than a window's room
    windows = plan_windows(counts, max_words=20, overlap=6, room=25)
    covered = set()
    for a, b in zip(windows, windows[1:], strict=False):
        assert b.first <= a.last and b.first > a.first  # overlapping (or touching) and moving on
        assert a.last - b.first <= 6 or b is windows[-1]  # the last window may reach further back
    assert [w for w in windows if w.first <= 300 < w.last] == [WordRange(300, 301, 40)]  # the over-long word alone
    assert windows[-1] == WordRange(301, 308, 7)  # the tail cannot reach back over it
    for w in windows:
        assert w.last - w.first <= 20 and w.tokens == sum(counts[w.first : w.last])
        assert w.tokens <= 25 or w.last - w.first == 1  # over the room only as a single over-long word
        covered.update(range(w.first, w.last))
    assert covered == set(range(len(counts)))


def test_malicious_pickle_is_refused(gliner_dirs: dict[str, Path], tmp_path: Path) -> None:
    """A pytorch_model.bin whose pickle would run code is refused, and the code never runs."""
    folder = tmp_path / "evil"
    folder.mkdir()
    for f in gliner_dirs["span"].iterdir():
        if f.is_file() and f.name != "pytorch_model.bin":
            (folder / f.name).write_bytes(f.read_bytes())
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))

    with (folder / "pytorch_model.bin").open("wb") as fh:
        pickle.dump({"token_rep_layer.weight": Exploit()}, fh)
    with pytest.raises(ModelLoadFailed, match="refused to unpickle"):
        load_through_catalogue(str(folder))
    assert not marker.exists()


@pytest.mark.slow
def test_gliner_is_imported_only_when_a_gliner_model_loads(gliner_dirs: dict[str, Path]) -> None:
    code = f"""
import sys
import shoal, engine.runtime, engine.worker.dispatch, engine.model.loader
assert "gliner" not in sys.modules, "gliner imported before any GLiNER model loaded"
from tests.extract_support import load_through_catalogue
load_through_catalogue({str(gliner_dirs["span"])!r})
assert "gliner" in sys.modules
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300, check=False
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_merge_keeps_duplicates_once_and_resolves_overlaps_like_gliner() -> None:
    a = [Found(0, 1, "org", 0.9), Found(5, 6, "person", 0.6)]  # window starting at word 0
    b = [Found(0, 1, "person", 0.8), Found(1, 2, "org", 0.7), Found(2, 2, "city", 0.5)]  # window starting at word 4
    flat = merge([(0, a), (4, b)], flat=True, multi_label=False)
    # words 4-6 as the two windows saw them: the best-scored (4,5) wins, (5,6) overlaps it, (6,6) does not
    assert [(f.start, f.end, f.label, f.score) for f in flat] == [
        (0, 1, "org", 0.9),
        (4, 5, "person", 0.8),
        (6, 6, "city", 0.5),
    ]
    dup = merge([(0, [Found(3, 4, "org", 0.6)]), (2, [Found(1, 2, "org", 0.75)])], flat=True, multi_label=False)
    assert [(f.start, f.end, f.score) for f in dup] == [(3, 4, 0.75)]  # the same span twice: kept once, best score
    nested = merge([(0, [Found(0, 4, "org", 0.9), Found(1, 2, "city", 0.8), Found(3, 6, "person", 0.7)])], False, False)
    assert [(f.start, f.end) for f in nested] == [(0, 4), (1, 2)]  # nesting kept, crossing dropped
    multi = merge([(0, [Found(0, 1, "org", 0.9), Found(0, 1, "person", 0.8)])], flat=True, multi_label=True)
    assert [f.label for f in multi] == ["org", "person"]  # one span, two labels


def test_the_gliner_release_is_the_one_the_extra_and_constraints_name() -> None:
    """The runtime is written against one gliner release: the venv holds it, the `gliner` extra asks for it, and
    constraints.txt (what CI and the images install) pins it, with a transformers its metadata accepts."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    from engine.model.gliner_runtime import GLINER_VERSION

    assert version("gliner") == GLINER_VERSION
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (spec,) = [Requirement(d) for d in extras["gliner"]]
    assert spec.name == "gliner" and spec.specifier.contains(GLINER_VERSION)
    pins = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["gliner"] == GLINER_VERSION
    caps = [Requirement(r) for r in requires("gliner") or [] if r.startswith("transformers")]
    assert caps and all(c.specifier.contains(pins["transformers"]) for c in caps), (caps, pins["transformers"])
    assert version("transformers") == pins["transformers"]


@pytest.mark.slow
def test_a_missing_gliner_package_is_a_clear_load_failure(gliner_dirs: dict[str, Path]) -> None:
    code = f"""
import sys
sys.modules["gliner"] = None  # as if it were not installed
from engine.errors import ModelLoadFailed
from tests.extract_support import load_through_catalogue
try:
    load_through_catalogue({str(gliner_dirs["span"])!r})
except ModelLoadFailed as e:
    print("refused:", e)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: GLiNER models need the gliner package: pip install 'shoal[gliner]'" in out.stdout


def test_token_counts_are_remembered_within_a_bound(gliner_dirs: dict[str, Path], monkeypatch: Any) -> None:
    """Remembered word and prompt counts equal the tokenizer's own, new words alone reach the tokenizer, and
    the caches stay bounded whatever the traffic (in entries, and in size: long words are not kept)."""
    from engine.model import gliner_runtime

    model = load_through_catalogue(str(gliner_dirs["span"]))
    assert isinstance(model, GlinerModel)
    tok = model.runtime.data_processor.transformer_tokenizer
    words = [w for w, _, _ in model.words(" ".join(texts(30, seed=9)))] + ["unheardofword", "x" * 300]
    want = [len(tok(w, add_special_tokens=False)["input_ids"]) for w in words]
    assert model.token_counts(words) == want
    asked: list[list[str]] = []
    real = model._count_tokens
    monkeypatch.setattr(model, "_count_tokens", lambda ws: asked.append(ws) or real(ws))
    assert model.token_counts(words[::-1]) == want[::-1]
    assert asked == [["x" * 300]]  # a long word is counted afresh: the cache's size is bounded in bytes too
    assert "x" * 300 not in model._word_tokens
    asked.clear()
    assert model.token_counts(["brandnewword", words[0], "brandnewword"])[1] == want[0]
    assert asked == [["brandnewword"]]
    monkeypatch.setattr(gliner_runtime, "WORD_CACHE", 50)
    monkeypatch.setattr(gliner_runtime, "PROMPT_CACHE", 3)
    for i in range(20):
        model.token_counts([f"w{i}-{k}" for k in range(7)])
        assert len(model._word_tokens) <= 50
    prompt = model.prompt_tokens(LABELS)
    for i in range(10):
        model.prompt_tokens([f"label {i}"])
        assert len(model._prompts) <= 3
    assert model.prompt_tokens(LABELS) == prompt
    huge = [f"{i} " + "y" * 5000 for i in range(3)]
    assert model.prompt_tokens(huge) == model._count_prompt(tuple(huge)) and tuple(huge) not in model._prompts
