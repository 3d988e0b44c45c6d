"""Support for the compatibility tests: a local cross-encoder (real MiniLM weights, a random head), the
server they talk to, running a client script in its venv, and the record the compatibility table is
rendered from (docs/compatibility.md, `python -m tests.compat_table`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat_venvs import REPO, VenvUnavailable, python_for
from tests.helpers import LiveServer, minilm_dir

RERANKER = "shoal-test/minilm-reranker"
RESULTS = REPO / ".cache" / "compat" / "results.json"


def make_reranker(folder: Path, cards: Path) -> Path:
    """MiniLM's real encoder under a seeded random classification head (one logit), saved with its tokenizer,
    and a card for it; no reranker weights can be downloaded here."""
    import shutil

    import torch
    from transformers import BertForSequenceClassification

    from tests.tiny_models import write_card

    if not (folder / "model.safetensors").exists():
        torch.manual_seed(0)
        model = BertForSequenceClassification.from_pretrained(str(minilm_dir()), num_labels=1).eval()
        model.save_pretrained(str(folder), safe_serialization=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            shutil.copy(minilm_dir() / name, folder / name)
    card = {"id": RERANKER, "family": "bert", "pooling": "cls", "max_seq_len": 256, "truncate": True}
    card |= {"source": {"path": str(folder)}, "tasks": ["score"], "outputs": ["score"]}
    card |= {"score": {"kind": "classifier", "activation": "sigmoid"}}
    write_card(cards, card | {"profiles": {"default": {"max_batch_tokens": 4096}}})
    return folder


def compat_server(tmp: Path, **env: str) -> tuple[LiveServer, Path]:
    """A live `shoal serve` that knows the local reranker (and uses it as the default reranker)."""
    ce = make_reranker(tmp / "reranker", tmp / "cards")
    full = {"SHOAL_MODEL_DIR": str(tmp / "cards"), "SHOAL_DEFAULT_RERANK_MODEL": RERANKER, **env}
    return LiveServer(env=full).wait_ready(), ce


def client_python(name: str) -> Path:
    try:
        return python_for(name)
    except VenvUnavailable as e:
        pytest.skip(f"the {name} client venv is unavailable: {e}")


def run_client(name: str, script: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run `script` with the client's venv python; its last stdout line is JSON, returned parsed."""
    import os

    out = subprocess.run(
        [str(client_python(name)), "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {}), "PYTHONPATH": ""},
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def record(client: str, calls: str) -> None:
    """Note that `client` passed `calls` (read by tests.compat_table to render the compatibility table)."""
    from tests.compat_venvs import versions

    name = {"sie-sdk": "sie", "sie-langchain": "sie", "sie-llamaindex": "sie"}.get(client, client)
    version = versions(name).get(client if client != "huggingface-hub" else "huggingface_hub", "")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[f"{client}|{calls}"] = {"client": client, "version": version, "calls": calls, "status": "pass"}
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True))
