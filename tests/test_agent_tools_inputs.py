"""Bad input gets a clear error or a correct result: cyclic and malformed taxonomies, a 50,000-leaf taxonomy
(timed), 5 MB texts. The big taxonomy uses a tiny random-weight BERT: it measures the tree code, not a model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import agent_tools
from agent_tools.config import ToolSettings
from agent_tools.errors import TaxonomyError
from agent_tools.taxonomy.outside import off_topics
from engine.errors import InvalidInput, PayloadTooLarge
from tests.agent_tools_support import PRODUCTS, generated_tree

FIVE_MB = "shoal " * (5 * 1024 * 1024 // 6)


def taxonomy_error(data: Any) -> str:
    with pytest.raises(TaxonomyError) as e:
        agent_tools.build_taxonomy(data)
    assert e.value.code == "INVALID_INPUT" and e.value.status == 400
    return e.value.message


def test_cyclic_taxonomies_are_refused() -> None:
    flat = {
        "nodes": [
            {"id": "a", "name": "A", "parent": "c"},
            {"id": "b", "name": "B", "parent": "a"},
            {"id": "c", "name": "C", "parent": "b"},
            {"id": "d", "name": "D"},
        ]
    }
    assert "cyclic" in taxonomy_error(flat) and "'a'" in taxonomy_error(flat)
    assert "cyclic" in taxonomy_error({"nodes": [{"id": "x", "name": "X", "parent": "x"}, {"id": "y", "name": "Y"}]})
    import yaml

    recursive = yaml.safe_load("&top\nname: shop\nchildren:\n  - name: loop\n    children: [*top]\n")
    assert "cyclic" in taxonomy_error(recursive)
    shared = yaml.safe_load("name: shop\nchildren:\n  - &a {name: socks}\n  - name: more\n    children: [*a]\n")
    assert len(agent_tools.build_taxonomy(shared).leaves) == 2  # an alias used twice (no cycle) is two nodes


@pytest.mark.parametrize(
    ("data", "expect"),
    [
        ("just text", "must be a mapping"),
        ([1, 2], "taxonomy.children[0]: a node must be a mapping"),
        ({"name": "root", "children": [{"description": "no name"}]}, "'name' must be a non-empty string"),
        ({"name": "root", "children": [{"name": "   "}]}, "'name' must be a non-empty string"),
        ({"name": "root", "children": {"name": "a"}}, "'children' must be a list"),
        ({"name": "root", "children": [{"name": "a", "childs": []}]}, "unknown field(s) ['childs']"),
        ({"name": "root", "children": [{"name": "a", "examples": "x"}]}, "'examples' must be a list of strings"),
        ({"name": "root", "children": [{"name": "A"}, {"name": "a"}]}, "duplicate child name"),
        ({"name": "root", "children": [{"name": "a", "id": 1}, {"name": "b", "id": 1}]}, "duplicate id '1'"),
        ({"name": "root"}, "no nodes under its root"),
        ({"name": "root", "children": []}, "no nodes under its root"),
        ({"nodes": [{"id": "a", "name": "A", "parent": "zz"}]}, "parent 'zz' is not the id of any node"),
        ({"nodes": [{"name": "A"}]}, "needs an 'id'"),
        ({"nodes": [{"id": "a", "name": "A"}, {"id": "a", "name": "B"}]}, "duplicate id 'a'"),
        ({"nodes": "a,b"}, "taxonomy.nodes must be a list"),
    ],
)
def test_malformed_taxonomies_get_clear_errors(data: Any, expect: str) -> None:
    assert expect in taxonomy_error(data)


def test_taxonomy_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: shop\nchildren:\n  - {name: a, description: b, c}\n  - [unclosed\n")
    with pytest.raises(TaxonomyError, match="not valid YAML"):
        agent_tools.load_taxonomy(bad)
    with pytest.raises(TaxonomyError, match="cannot read taxonomy"):
        agent_tools.load_taxonomy(tmp_path / "missing.yaml")
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"nodes": [{"id": 1, "name": "A"}, {"id": 2, "name": "B", "parent": 1}]}))
    t = agent_tools.load_taxonomy(js)
    assert t.labels[t.leaves[0]] == "A > B" and t.ids[t.leaves[0]] == "2"
    with pytest.raises(TaxonomyError, match="more than 100 nodes"):
        agent_tools.load_taxonomy(PRODUCTS, max_nodes=100)
    with pytest.raises(TaxonomyError, match="no taxonomy named 'nope'"):
        agent_tools.ToolContext(None, ToolSettings(taxonomies={"products": PRODUCTS})).taxonomy("nope")


@pytest.mark.slow
def test_a_50000_leaf_taxonomy_stays_fast(engine: Any, tiny_bert: Path, tmp_path: Path) -> None:
    tree = generated_tree(50, 50, 20)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(tree))
    started = time.perf_counter()
    taxonomy = agent_tools.load_taxonomy(path)
    parsed = time.perf_counter() - started
    assert len(taxonomy.leaves) == 50_000 and len(taxonomy) == 52_551
    settings = ToolSettings(embed_model=str(tiny_bert), taxonomies={"big": path})
    texts = [f"red fish and blue city number {k}" for k in range(100)]

    def call(batch: list[str], taxonomy: Any = "big", **options: Any) -> tuple[dict[str, Any], float]:
        t0 = time.perf_counter()
        r = agent_tools.classify_taxonomy(texts=batch, taxonomy=taxonomy, client=engine, settings=settings, **options)
        return r, time.perf_counter() - t0

    first, indexed = call(texts[:1])
    # every node's own and path texts (the same text once: 50 top-level nodes), 256 reference names, the
    # general topics outside the taxonomy, the text
    assert first["model_calls"]["encode_items"] == 2 * 52_550 - 50 + 256 + len(off_topics()) + 1
    second, warm = call(texts)
    assert second["model_calls"]["encode_items"] == 100  # the node vectors are cached by the taxonomy's hash
    inline, inline_s = call(texts, taxonomy=tree)  # the same tree sent inline: parsed again, index reused
    assert inline["model_calls"]["encode_items"] == 100 and inline["taxonomy"]["leaves"] == 50_000
    deep = call(texts[:5], threshold=0)[0]["results"]
    assert all(r["is_leaf"] and len(r["path"]) == 3 for r in deep)
    print(
        f"\n50,000-leaf taxonomy (52,551 nodes, tiny BERT): load+validate {parsed:.2f}s; first call, building the"
        f" index: {indexed:.1f}s; then 100 texts: {warm:.2f}s, {inline_s:.2f}s with"
        " the taxonomy sent inline (parsed per call)"
    )


def test_five_megabyte_texts_get_payload_too_large(engine: Any) -> None:
    cases = [
        ("classify_taxonomy", {"texts": [FIVE_MB], "taxonomy": {"name": "t", "children": [{"name": "a"}]}}),
        ("filter_context", {"query": "q", "text": FIVE_MB}),
        ("filter_context", {"query": "q", "passages": ["short", FIVE_MB]}),
        ("rerank", {"query": "q", "documents": [FIVE_MB]}),
        ("embed", {"texts": [FIVE_MB]}),
        ("search", {"query": FIVE_MB}),
    ]
    for name, arguments in cases:
        with pytest.raises(PayloadTooLarge) as e:
            getattr(agent_tools, name)(client=engine, **arguments)
        assert e.value.status == 413 and "SHOAL_TOOLS_MAX_TEXT_CHARS" in e.value.message, name
    with pytest.raises(PayloadTooLarge, match="SHOAL_TOOLS_MAX_TEXTS"):
        agent_tools.embed(client=engine, texts=["a"] * 3000)
    many = "\n\n".join(f"Paragraph {k} about something else entirely." for k in range(3000))
    with pytest.raises(PayloadTooLarge, match="splits into 3,000 passages"):
        agent_tools.filter_context(client=engine, query="q", text=many, passage_tokens=8)


def test_bad_arguments_in_python_get_clear_validation_errors(engine: Any) -> None:
    with pytest.raises(InvalidInput, match=r"classify_taxonomy: invalid arguments: texts: Field required"):
        agent_tools.classify_taxonomy(client=engine, taxonomy="products")
    with pytest.raises(InvalidInput, match=r"rerank_top: Input should be greater than or equal to 1"):
        agent_tools.classify_taxonomy(client=engine, texts=["a"], taxonomy="x", rerank_top=0)
    with pytest.raises(InvalidInput, match=r"texts.0: String should have at least 1 character"):
        agent_tools.embed(client=engine, texts=[""])
    with pytest.raises(InvalidInput, match=r"colour: Extra inputs are not permitted"):
        agent_tools.rerank(client=engine, query="q", documents=["d"], colour="red")
    with pytest.raises(InvalidInput, match=r"give exactly one of 'passages' and 'text'"):
        agent_tools.filter_context(client=engine, query="q", passages=["a"], text="b")
