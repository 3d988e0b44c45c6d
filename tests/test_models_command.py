"""`shoal models` says where each model's weights are (package, HF cache, path) or that they are missing,
agreeing with the loader's own resolution; the table fits 80 columns piped and never cuts a model id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli_support import shoal
from tests.helpers import REPO

AGREE = """
import json, sys
from engine.catalogue.catalogue import Catalogue
from engine.catalogue.weights import resolve_weights, weights_status
from engine.errors import ShoalError
out = {}
for card in Catalogue(sys.argv[1]).known():
    try:
        found = str(resolve_weights(card, offline=True))
    except ShoalError:
        found = None
    s = weights_status(card, offline=True)
    out[card.id] = [found, s.location if s.available else None, s.source]
print(json.dumps(out))
"""

CARD = """id: test/cached-model
family: bert
source: {hf_repo: test/cached-model, revision: v1}
tasks: [encode]
outputs: [dense]
dense_dim: 8
"""


def fake_hf_cache(cache: Path) -> Path:
    """A Hugging Face hub cache holding one repo at tag v1 (refs/v1 -> a commit's snapshot with safetensors)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--test--cached-model"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"")
    (repo / "refs").mkdir()
    (repo / "refs" / "v1").write_text(commit)
    return snap


def test_weights_status_agrees_with_the_loader(tmp_path: Path) -> None:
    """For every card (and one in a fake HF cache), the cheap look finds what resolve_weights finds."""
    snap = fake_hf_cache(tmp_path / "hub")
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "cached.yaml").write_text(CARD)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", AGREE, str(cards)], env=env, capture_output=True, text=True, check=True)
    found = json.loads(r.stdout)
    for model, (resolved, located, source) in found.items():
        assert resolved == located, (model, resolved, located, source)
    assert found["test/cached-model"] == [str(snap), str(snap), "hf-cache"]
    assert found["sentence-transformers/all-MiniLM-L6-v2"][2] == "package"
    assert found["naver/splade-v3"] == [None, None, "missing"]


def test_models_table_fits_80_columns(tmp_path: Path) -> None:
    r = shoal("models", cwd=tmp_path)  # piped, as in `shoal models | less`
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, r.stdout
    ids = json.loads(shoal("models", "--json", cwd=tmp_path).stdout)
    rows = {line.split()[0]: line for line in lines if line and not line.startswith((" ", "-"))}
    for info in ids:
        assert info["name"] in rows, f"{info['name']} cut or missing in the table"
        assert rows[info["name"]].rstrip().endswith(info["weights"]["source"])
    minilm = next(i for i in ids if i["name"] == "sentence-transformers/all-MiniLM-L6-v2")
    assert minilm["weights"]["available"] and minilm["weights"]["source"] == "package"
    splade = next(i for i in ids if i["name"] == "naver/splade-v3")
    assert not splade["weights"]["available"] and any("HF cache" in t for t in splade["weights"]["tried"])
    assert "docs/troubleshooting.md#missing-weights" in " ".join(r.stdout.split())


def test_tuned_precisions_follow_the_table_within_80_columns(tmp_path: Path) -> None:
    """A model `shoal tune` measured on this kind of device gets a line under the table: the precisions that
    passed the quality gate with their figures, * on the one in use (the store is written here, not tuned)."""
    from engine.catalogue.cards import Profile
    from engine.residency.store import ProfileStore, device_kind

    minilm = "sentence-transformers/all-MiniLM-L6-v2"
    report = {
        "grid": [{"dtype": "float32", "tokens_per_s": 1000.0}, {"dtype": "int8", "tokens_per_s": 1800.0}],
        "gates": {"int8": {"passed": True, "mean_cosine": 0.9937, "ndcg_drop": 0.0}},
    }
    store = tmp_path / "profiles.json"
    ProfileStore(store).put(minilm, device_kind("cpu"), Profile(max_batch_tokens=512, dtype="int8"), report)
    r = shoal("models", "--store", str(store), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout
    text = " ".join(r.stdout.split())
    assert f"{minilm}: float32, int8* (cos 0.9937, nDCG -0.000)" in text, r.stdout
    assert "no model has been tuned" not in text
    untuned = shoal("models", "--store", str(tmp_path / "none.json"), cwd=tmp_path)
    assert "precisions: no model has been tuned on cpu yet" in untuned.stdout
