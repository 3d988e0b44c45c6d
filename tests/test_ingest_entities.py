"""The pipeline's entities and classify steps: entity and class columns written, a filter on an entity returns
exactly the chunks that hold it (SDK and `shoal search --filter`), and unchanged labels re-extract nothing
while changed labels re-process every file."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from connectors import open_store
from pipeline import ingest, search
from pipeline.config import ChunkConfig, PipelineConfig, Step
from shoal.cli import app
from tests.conftest import MINILM
from tests.helpers import WORDS

TOPICS = ["sports", "cooking", "finance", "travel"]
SEEDS = {
    "match.md": "The striker scored twice and the crowd at the stadium cheered the final whistle.",
    "recipe.md": "Simmer the onions, add the garlic and bake the bread for twenty minutes.",
    "bank.md": "The central bank raised interest rates and share prices fell sharply.",
}


def make_folder(root: Path) -> None:
    """Three Markdown files: a topic sentence and paragraphs of the tiny vocabulary (several chunks each)."""
    rnd = random.Random(5)
    root.mkdir(parents=True)
    for name, topic in SEEDS.items():
        paragraphs = [" ".join(rnd.choice(WORDS) for _ in range(40)) + "." for _ in range(4)]
        (root / name).write_text(f"# {name[:-3].title()}\n\n{topic}\n\n" + "\n\n".join(paragraphs) + "\n")


def config(tmp_path: Path, gliner: Path, labels: list[str]) -> PipelineConfig:
    steps = [
        Step(kind="dense", model=MINILM),
        Step(kind="entities", model=str(gliner), labels=labels, threshold=0.6),
        Step(kind="classify", model=MINILM, labels=TOPICS),
    ]
    chunking = ChunkConfig(target_tokens=48, overlap_tokens=8)
    return PipelineConfig(db=f"lancedb://{tmp_path / 'db'}", steps=steps, chunking=chunking)


def rows(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return open_store(cfg.db).rows(cfg.collection, ["id", "source", "text", "entities", "entity_tags", "classes"])


def extract_items(engine: Any) -> int:
    """Items this engine's worker has run through extract batches so far (its recent-batch window)."""
    return sum(b.items for b in engine.core.worker.stats.recent if b.kind == "extract")


def test_entities_and_classes_are_written_filtered_and_fingerprinted(
    tmp_path: Path, gliner_dirs: dict[str, Path], engine: Any
) -> None:
    root = tmp_path / "docs"
    make_folder(root)
    gliner = gliner_dirs["span"]
    cfg = config(tmp_path, gliner, ["city", "animal"])
    first = ingest(root, cfg, client=engine)
    assert first.files_processed == 3 and not first.files_failed
    stored = rows(cfg)
    assert len(stored) >= 6
    tags_seen: dict[str, set[str]] = {}
    for r in stored:
        ents = dict(r["entities"])
        assert set(ents) <= {"city", "animal"}
        assert sorted(r["entity_tags"]) == sorted(f"{k}:{t}" for k, v in ents.items() for t in v)
        for tag in r["entity_tags"]:
            tags_seen.setdefault(tag, set()).add(r["id"])
        assert len(r["classes"]) == 1 and r["classes"][0] in TOPICS  # single-label: the best class
    topic_of = {r["source"]: r["classes"][0] for r in stored if any(s in r["text"] for s in SEEDS.values())}
    assert topic_of == {"match.md": "sports", "recipe.md": "cooking", "bank.md": "finance"}

    # a tag some chunks hold and others do not: the filter returns exactly those chunks
    tag, holders = next((t, ids) for t, ids in sorted(tags_seen.items()) if 0 < len(ids) < len(stored))
    native = f"array_has(entity_tags, '{tag}')"
    hits = search("anything", db=cfg.db, filter=native, top_k=100, client=engine)
    assert {h.id for h in hits} == holders
    label, text = tag.split(":", 1)
    hits = search("anything", db=cfg.db, where=f"entity:{label}={text}", top_k=100, client=engine)
    assert {h.id for h in hits} == holders
    cli = CliRunner().invoke(app, ["search", "anything", "--db", cfg.db, "--filter", native, "-k", "100", "--json"])
    assert cli.exit_code == 0, cli.output
    assert {json.loads(x)["id"] for x in cli.stdout.strip().splitlines()} == holders

    # same labels: nothing is re-extracted
    before = extract_items(engine)
    again = ingest(root, cfg, client=engine)
    assert again.files_unchanged == 3 and again.files_processed == 0
    assert extract_items(engine) == before
    assert again.fingerprint == first.fingerprint

    # other labels: a new fingerprint, every file re-processed with the new label set
    changed = config(tmp_path, gliner, ["city", "person"])
    third = ingest(root, changed, client=engine)
    assert third.fingerprint != first.fingerprint and third.files_processed == 3
    assert extract_items(engine) > before
    assert all(set(dict(r["entities"])) <= {"city", "person"} for r in rows(changed))


def test_a_step_model_with_no_weights_stops_the_run_before_any_file(tmp_path: Path, engine: Any) -> None:
    """A catalogue GLiNER with no weights here (offline): MODEL_UNAVAILABLE before a file is read or recorded."""
    import pytest

    from pipeline.config import ConfigError

    root = tmp_path / "docs"
    make_folder(root)
    steps = [Step(kind="dense", model=MINILM), Step(kind="entities", model="urchade/gliner_small-v2.1", labels=["x"])]
    cfg = PipelineConfig(db=f"lancedb://{tmp_path / 'db'}", steps=steps)
    before = engine.core.worker.stats.items
    with pytest.raises(ConfigError) as refused:
        ingest(root, cfg, client=engine)
    assert refused.value.code == "MODEL_UNAVAILABLE" and "urchade/gliner_small-v2.1" in refused.value.message
    assert engine.core.worker.stats.items == before, "nothing was embedded"
    assert open_store(cfg.db).list_collections() == [], "no collection was made, no chunk written"
    r = CliRunner().invoke(app, ["ingest", str(root), "--db", f"lancedb://{tmp_path / 'cli-db'}", "-q"])
    assert r.exit_code == 0, r.output  # the same folder with the default steps runs
