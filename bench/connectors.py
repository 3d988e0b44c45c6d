"""Vector stores side by side: upsert throughput and search latency, same chunks, one run.

For every backend available here (LanceDB embedded, Qdrant local mode, Chroma PersistentClient, a real
`chroma run` server on a free loopback port; a Qdrant server or Weaviate when QDRANT_URL / WEAVIATE_URL
is set) it writes N chunks (384-d unit vectors, text from bench/data/passages.jsonl with entities) in
pipeline-sized batches, then times dense and hybrid searches (p50/p99). Ratios are against LanceDB,
measured in the same run. The upsert time of the last quarter over the first quarter checks that writes
stay linear as the collection grows. Writes bench/results/connectors.json.

    .venv/bin/python bench/connectors.py [--chunks 10000] [--queries 200] [--backends lancedb,qdrant-local,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from connectors import CollectionSpec, SearchRequest, open_store  # noqa: E402

DIM = 384
BATCH = 512  # the pipeline's default write_batch_rows
ALL = ["lancedb", "qdrant-local", "chroma-local", "chroma-http", "qdrant-server", "weaviate"]


def make_rows(n: int, seed: int = 0) -> list[dict]:
    texts = [json.loads(line)["text"] for line in (ROOT / "bench/data/passages.jsonl").open()]
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = []
    for i in range(n):
        org = ["Acme", "Beta", "Gamma"][i % 3]
        rows.append({
            "id": f"chunk-{i:06d}", "text": f"{texts[i % len(texts)][:800]} ref{i}", "root": "/bench",
            "source": f"doc-{i // 20:05d}.md", "title": f"Doc {i // 20}", "kind": "markdown", "chunk_index": i % 20,
            "chunk_hash": f"h{i}", "doc_hash": f"d{i // 20}", "pages": [1 + i % 9], "heading_path": ["Part"],
            "char_start": 0, "char_end": 800, "n_tokens": 180, "ingested_at": 0.0, "vector": vecs[i],
            "entities": {"organisation": [org]}, "entity_tags": [f"organisation:{org}"],
        })  # fmt: skip
    return rows


class ChromaServer:
    def __init__(self, data: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or "chroma"
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        cmd = [exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        import httpx

        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise TimeoutError("chroma run did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def backend_uri(name: str, tmp: Path, servers: dict) -> str | None:
    if name == "lancedb":
        return f"lancedb://{tmp / 'lance'}"
    if name == "qdrant-local":
        return f"qdrant+local://{tmp / 'qdrant'}"
    if name == "chroma-local":
        return f"chroma+local://{tmp / 'chroma'}"
    if name == "chroma-http":
        servers["chroma"] = ChromaServer(tmp / "chroma-server")
        return f"chroma://127.0.0.1:{servers['chroma'].port}/bench"
    env = {"qdrant-server": "QDRANT_URL", "weaviate": "WEAVIATE_URL"}[name]
    if not os.environ.get(env):
        return None
    u = urlsplit(os.environ[env])
    scheme = "qdrant" if name == "qdrant-server" else "weaviate"
    return f"{scheme}://{u.hostname}:{u.port}/{'Bench' if scheme == 'weaviate' else 'bench'}"


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def bench_one(uri: str, rows: list[dict], queries: int) -> dict:
    store = open_store(uri)
    coll = "bench"
    store.drop_collection(coll)
    store.ensure_collection(CollectionSpec(coll, DIM, entities=True))
    batch_s = []
    t0 = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        t = time.perf_counter()
        store.upsert(coll, rows[i : i + BATCH])
        batch_s.append(time.perf_counter() - t)
    store.finalize(coll)
    upsert_s = time.perf_counter() - t0
    assert store.count(coll) == len(rows)
    q = max(1, len(batch_s) // 4)
    rng = np.random.default_rng(1)
    picks = rng.choice(len(rows), size=queries, replace=False)
    out = {"chunks": len(rows), "upsert_s": upsert_s, "chunks_per_s": len(rows) / upsert_s,
           "last_over_first_quarter": (sum(batch_s[-q:]) / q) / (sum(batch_s[:q]) / q)}  # fmt: skip
    found = {}
    for mode in ("dense", "hybrid"):
        lat, top1 = [], 0
        for i in picks:
            noisy = rows[i]["vector"] + rng.normal(scale=0.02, size=DIM).astype(np.float32)
            words = " ".join(rows[i]["text"].split()[:6]) + f" ref{i}"
            req = SearchRequest(vector=noisy, text=words, mode=mode, top_k=10)
            t = time.perf_counter()
            hits = store.search(coll, req)
            lat.append(time.perf_counter() - t)
            top1 += bool(hits) and hits[0].id == rows[i]["id"]
        out[mode] = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "top1": top1 / queries}
        found[mode] = top1
    store.drop_collection(coll)
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--backends", default=",".join(ALL))
    args = ap.parse_args()
    rows = make_rows(args.chunks)
    results: dict[str, dict] = {}
    servers: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in args.backends.split(","):
                uri = backend_uri(name, Path(tmp), servers)
                if uri is None:
                    print(f"{name:14s} skipped (no server URL set)")
                    continue
                results[name] = bench_one(uri, rows, args.queries)
                print(f"{name:14s} done", flush=True)
        finally:
            for s in servers.values():
                s.stop()
    base = results.get("lancedb")
    print(f"\n{args.chunks} chunks of {DIM}-d, batches of {BATCH}; {args.queries} queries per mode; ratios vs lancedb")
    head = f"{'backend':14s} {'chunks/s':>9s} {'x':>6s} {'last/first':>10s} {'dense p50/p99 ms':>17s} {'x p50':>6s} {'hybrid p50/p99 ms':>18s} {'x p50':>6s}"  # noqa: E501
    print(head)
    for name, r in results.items():
        rx = r["chunks_per_s"] / base["chunks_per_s"] if base else float("nan")
        dx = r["dense"]["p50_ms"] / base["dense"]["p50_ms"] if base else float("nan")
        hx = r["hybrid"]["p50_ms"] / base["hybrid"]["p50_ms"] if base else float("nan")
        print(f"{name:14s} {r['chunks_per_s']:9.0f} {rx:6.2f} {r['last_over_first_quarter']:10.2f} "
              f"{r['dense']['p50_ms']:8.1f}/{r['dense']['p99_ms']:<8.1f} {dx:6.2f} "
              f"{r['hybrid']['p50_ms']:9.1f}/{r['hybrid']['p99_ms']:<8.1f} {hx:6.2f}")  # fmt: skip
    out = ROOT / "bench/results/connectors.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"chunks": args.chunks, "dim": DIM, "queries": args.queries, "results": results}, indent=2)
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
