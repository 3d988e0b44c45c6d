"""The pipeline takes any shoal client (`ShoalClient`: Engine, AsyncEngine, Client, AsyncClient) and gets
everything through it, the chunking tokenizer included: an engine's own card folder is honoured."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.client.protocol import ShoalClient
from tests.helpers import make_tiny_bert
from tests.tiny_models import write_card


def test_ingest_takes_the_tokenizer_from_the_engine_it_is_given(tmp_path: Path) -> None:
    """A model known only to this engine (a card in its model_dir) chunks and embeds; before, chunking
    looked the model up in the default catalogue and refused the run."""
    import shoal
    from engine.config import EngineSettings
    from engine.runtime import AsyncEngine
    from pipeline import PipelineConfig, ingest, ingest_async

    make_tiny_bert(tmp_path / "tiny")
    card = {"id": "team/tiny", "family": "bert", "pooling": "mean", "max_seq_len": 64, "dense_dim": 32}
    write_card(tmp_path / "cards", card | {"source": {"path": str(tmp_path / "tiny")}})
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Pumps\n\nThe impeller is checked every week. Seals are replaced yearly.\n")
    steps = [{"kind": "dense", "model": "team/tiny"}]

    async def in_process() -> int:
        async with AsyncEngine(EngineSettings(model_dir=tmp_path / "cards", offline=True)) as engine:
            client: ShoalClient = engine
            cfg = PipelineConfig.model_validate({"db": f"lancedb://{tmp_path / 'db1'}", "steps": steps})
            s = await ingest_async(docs, cfg, client=client)
            assert not s.files_failed, s.files_failed
            return s.chunks_written

    assert asyncio.run(in_process()) >= 1
    with shoal.Engine(model_dir=tmp_path / "cards", offline=True) as blocking:  # the blocking facade, via .aio
        cfg = PipelineConfig.model_validate({"db": f"lancedb://{tmp_path / 'db2'}", "steps": steps})
        s = ingest(docs, cfg, client=blocking)
    assert s.files_processed == 1 and s.chunks_written >= 1 and not s.files_failed
