"""The search path over any store with filters: portable `--where` (fields checked, translated per store),
the native escape hatch (`--filter`, parsed whole or refused), one-line errors with exit code 1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import shoal
from connectors import CollectionSpec, StoreError, open_store
from connectors.filters import FilterError, parse, parse_cli
from connectors.sql import check_sql
from pipeline import search
from pipeline.config import PipelineConfig, Step
from pipeline.state import manifest_for
from shoal.cli import app
from tests.store_backends import chroma_server, store_url, unique  # noqa: F401 - chroma_server is a fixture

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DOCS = [  # (source, text, organisations)
    ("a.pdf", "The pump impeller must be cleaned every spring before the season starts.", ["Acme"]),
    ("a.pdf", "Acme supplies replacement seals for the PT-400 pump within two weeks.", ["Acme"]),
    ("b.md", "The harbour master monitors VHF channel 14 around the clock.", ["Harbour Board"]),
    ("b.md", "Pump maintenance contracts are renewed by the Harbour Board each year.", ["Harbour Board", "Acme"]),
    ("c.txt", "Seal pups were counted on the north beach in early June.", []),
]


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    with shoal.Engine() as e:
        yield e


def build(uri: str, coll: str, engine) -> PipelineConfig:
    """A collection written by hand as the pipeline would (vectors from MiniLM, entities, a manifest entry)."""
    steps = [Step(kind="dense", model=MODEL), Step(kind="entities", model="some/extractor", labels=["organisation"])]
    cfg = PipelineConfig(db=uri, collection=coll, steps=steps)
    vectors = engine.encode(MODEL, [t for _, t, _ in DOCS])
    rows = []
    for i, ((source, text, orgs), v) in enumerate(zip(DOCS, vectors, strict=True)):
        ents = {"organisation": orgs} if orgs else {}
        rows.append({
            "id": f"doc-{i}", "text": text, "root": "/docs", "source": source, "chunk_index": i, "pages": [1],
            "heading_path": [], "vector": np.asarray(v["dense"]), "entities": ents,
            "entity_tags": [f"organisation:{o}" for o in orgs],
        })  # fmt: skip
    store = open_store(uri)
    try:
        store.ensure_collection(CollectionSpec(coll, 384, entities=True))
        store.upsert(coll, rows)
        store.finalize(coll)
        manifest = manifest_for(store)
        manifest.record_root(coll, "/docs", cfg.model_dump(mode="json"), uri)
        manifest.close()
    finally:
        store.close()
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["lancedb", "qdrant-edge", "chroma-local", "chroma-http", "weaviate"])
def test_portable_where_through_the_sdk_on_every_store(backend, tmp_path: Path, request, engine) -> None:
    coll = unique("docs")
    uri = store_url(backend, tmp_path, request, coll)
    build(uri, coll, engine)
    q = "who supplies pump seals"
    hits = search(q, db=uri, collection=coll, top_k=5, where="entity:organisation=Acme", client=engine)
    assert {h.id for h in hits} == {"doc-0", "doc-1", "doc-3"}
    assert hits[0].id == "doc-1"
    hits = search(q, db=uri, collection=coll, top_k=5, where=["source=b.md", "entity:organisation=Acme"], client=engine)
    assert [h.id for h in hits] == ["doc-3"]
    hits = search(q, db=uri, collection=coll, where={"or": [{"field": "source", "value": "c.txt"},
                  {"field": "entity:organisation", "value": "Harbour Board"}]}, mode="dense", client=engine)  # fmt: skip
    assert {h.id for h in hits} == {"doc-2", "doc-3", "doc-4"}
    hits = search("PT-400", db=uri, collection=coll, top_k=1, mode="text", client=engine)
    assert hits[0].id == "doc-1"
    for bad, code in (("colour=red", "UNKNOWN_FIELD"), ("entity:person=Ann", "UNKNOWN_FIELD"), ("chunk_index>x", "INVALID_FILTER")):  # fmt: skip
        with pytest.raises(FilterError) as e:
            search(q, db=uri, collection=coll, where=bad, client=engine)
        assert e.value.code == code


@pytest.mark.slow
def test_cli_where_and_native_filters(tmp_path: Path, engine) -> None:
    db = f"lancedb://{tmp_path / 'db'}"
    build(db, "chunks", engine)
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, ["search", "pump seals", "--db", db, *args])

    r = run("--where", "source=a.pdf", "--where", "entity:organisation=Acme", "--json")
    assert r.exit_code == 0, r.output
    assert {json.loads(x)["id"] for x in r.stdout.strip().splitlines()} == {"doc-0", "doc-1"}
    r = run("--filter", "source = 'b.md'", "--json")
    assert r.exit_code == 0 and {json.loads(x)["source"] for x in r.stdout.strip().splitlines()} == {"b.md"}
    for args, code in [
        (["--filter", "1=1; drop table chunks"], "INVALID_FILTER"),
        (["--filter", "source = 'a.pdf' garbage"], "INVALID_FILTER"),
        (["--filter", "source = 'a.pdf') OR (1=1"], "INVALID_FILTER"),
        (["--filter", "source = "], "INVALID_FILTER"),
        (["--filter", "nosuch = 1"], "INVALID_FILTER"),
        (["--where", "colour=red"], "UNKNOWN_FIELD"),
        (["--where", "entity:person=Ann"], "UNKNOWN_FIELD"),
        (["--where", "pages>=many"], "INVALID_FILTER"),
        (["--where", "{not json"], "INVALID_FILTER"),
    ]:
        r = run(*args)
        assert r.exit_code == 1, (args, r.output)
        assert r.output.startswith(code) and "Traceback" not in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) <= 2, (args, r.output)
    assert open_store(db).count("chunks") == len(DOCS), "nothing was dropped"


def test_cli_text_filters_parse() -> None:
    assert parse_cli("source=a.pdf") == parse({"field": "source", "op": "eq", "value": "a.pdf"})
    c = parse_cli("entity:organisation=Acme|Beta Ltd")
    assert (c.field, c.op, c.value) == ("entity:organisation", "in", ("Acme", "Beta Ltd"))
    assert parse_cli("chunk_index>=3").value == 3 and parse_cli("chunk_index>=3").op == "gte"
    assert parse_cli("title=a\\|b").value == "a|b"
    assert parse_cli("source != x.md").op == "ne"
    for bad in ("no operator", "=x", "source>3", "chunk_index=|"):
        with pytest.raises(FilterError):
            parse_cli(bad)
    with pytest.raises(FilterError):
        parse({"field": "source", "op": "like", "value": "x"})
    with pytest.raises(FilterError):
        parse({"and": []})


def test_raw_sql_is_one_whole_expression() -> None:
    assert check_sql("source = 'a.md'") == "(source = 'a.md')"
    assert check_sql("title = 'it''s; fine'") == "(title = 'it''s; fine')", "quoted ; is text, not a statement"
    assert check_sql("array_has(heading_path, 'Other')") == "(array_has(heading_path, 'Other'))"
    for bad in (
        "1=1; drop table chunks",
        "source = 'a') OR (1=1",
        "(source = 'a'",
        "a = 'x",
        "a = 1 -- c",
        "a /* c */",
        "",
    ):
        with pytest.raises(StoreError) as e:
            check_sql(bad)
        assert e.value.code == "INVALID_FILTER"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["qdrant-edge", "chroma-local"])
def test_rerank_step_works_on_any_store(backend, tmp_path: Path, request, engine) -> None:
    from tests.tiny_models import make

    ce = tmp_path / "tiny-cross-encoder"
    make("bert", "ForSequenceClassification", ce, num_labels=1)
    coll = unique("rr")
    uri = store_url(backend, tmp_path, request, coll)
    build(uri, coll, engine)
    hits = search("pump seals", db=uri, collection=coll, top_k=3, rerank=str(ce), where="source!=c.txt", client=engine)
    assert len(hits) == 3 and all(h.metadata["source"] != "c.txt" for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and all("retrieval_score" in h.metadata for h in hits)
    direct = engine.score(str(ce), "pump seals", [h.text for h in hits])["scores"]
    by_text = {hits[int(d["item_id"].split("-")[-1])].text: d["score"] for d in direct}
    assert all(h.score == pytest.approx(by_text[h.text], rel=1e-4, abs=1e-5) for h in hits)
