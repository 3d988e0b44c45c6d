"""Vector stores side by side and at scale: write throughput, index build, query latency, memory, disk.

For every backend available here (LanceDB embedded, Qdrant Edge, qdrant-client's local mode, Chroma
PersistentClient, a real `chroma run` server on a free loopback port; a Qdrant server or Weaviate when
QDRANT_URL / WEAVIATE_URL is set) and every size asked for, a fresh child process writes N synthetic chunks
(384-d unit vectors, text from bench/data/passages.jsonl, metadata and entities) in pipeline-sized batches,
builds the store's indexes (`finalize`: LanceDB FTS, scalar from 1k rows (its id index is built as it writes),
IVF_SQ from 50k rows; Qdrant Edge's HNSW and segment merge), then times dense, hybrid and filtered searches
(p50 / p99), measures dense recall@10 against an exact (brute-force) search, and re-ingests 1% and 5% of the
ids (new vectors and text) followed by `finalize`: the cost per re-written chunk against the fresh write's. It reports chunks/s of the writes alone and with the index build, the store's resident memory
(peak RSS of the child, less the rows it holds; for chroma-http the server's peak too), the size on disk, and
which vector index answered. Ratios: write cost per chunk at each size over the smallest size, the last
quarter's write batches over the first quarter's (q4/q1: 1 when a write costs the same however large the
table), each backend against LanceDB and Qdrant Edge against qdrant-client's local mode, all measured in the
same run. On a busy machine `--repeat N` runs each backend and size N times and keeps the run that wrote
fastest (every run's chunks/s is in the JSON). Writes bench/results/connectors.json (BENCH_OUT=NAME:
bench/results/NAME.json).

    .venv/bin/python bench/connectors.py [--sizes 10000,100000] [--queries 200] [--backends lancedb,qdrant-edge,...]
        [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

from connectors import CollectionSpec, SearchRequest, VectorStore, open_store  # noqa: E402
from connectors.filters import parse  # noqa: E402

DIM = 384
BATCH = 512  # the pipeline's default write_batch_rows
ALL = [
    "lancedb",
    "qdrant-edge",
    "qdrant-edge-disk",
    "qdrant-local",
    "chroma-local",
    "chroma-http",
    "qdrant-server",
    "weaviate",
]
FILTER = ["entity:organisation=Acme", "chunk_index<5"]  # one chunk in twelve
REINGEST = (0.01, 0.05)  # fractions of the ids re-written after the build (a nightly re-ingest of edited files)


def make_rows(n: int, seed: int = 0) -> list[dict]:
    texts = [json.loads(line)["text"] for line in (ROOT / "bench/data/passages.jsonl").open()]
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = []
    for i in range(n):
        org = ["Acme", "Beta", "Gamma"][i % 3]
        rows.append({
            "id": f"chunk-{i:07d}", "text": f"{texts[i % len(texts)][:800]} ref{i}", "root": "/bench",
            "source": f"doc-{i // 20:06d}.md", "title": f"Doc {i // 20}", "kind": "markdown", "chunk_index": i % 20,
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

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def open_backend(name: str, tmp: Path, servers: dict) -> tuple[VectorStore | None, Path | None]:
    """The store for a backend and the folder its data lands in (None when no server URL is set)."""
    if name == "qdrant-local":  # qdrant-client's pure-Python local mode, kept for the comparison
        from connectors.qdrant import QdrantStore

        return QdrantStore(f"qdrant+local://{tmp / 'qdrant-local'}"), tmp / "qdrant-local"
    local = {"lancedb": "lancedb", "qdrant-edge": "qdrant+edge", "chroma-local": "chroma+local"}
    if name in local:
        return open_store(f"{local[name]}://{tmp / name}"), tmp / name
    if name == "qdrant-edge-disk":  # vectors and graph on disk, an int8 copy in RAM
        return open_store(f"qdrant+edge://{tmp / name}?memory=disk"), tmp / name
    if name == "chroma-http":
        servers["chroma"] = ChromaServer(tmp / "chroma-server")
        return open_store(f"chroma://127.0.0.1:{servers['chroma'].port}/bench"), tmp / "chroma-server"
    env = {"qdrant-server": "QDRANT_URL", "weaviate": "WEAVIATE_URL"}[name]
    if not os.environ.get(env):
        return None, None
    u = urlsplit(os.environ[env])
    uri = f"qdrant://{u.hostname}:{u.port}/bench" if name == "qdrant-server" else f"weaviate://{u.hostname}:{u.port}/Bench"  # fmt: skip
    return open_store(uri), None


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def disk_mib(folder: Path | None) -> float | None:
    if folder is None or not folder.exists():
        return None
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) / 2**20  # allocated, not apparent


def index_in_use(store: VectorStore, coll: str) -> str:
    """Which vector index the store answers dense queries from, as far as it tells."""
    name = type(store).__name__
    if name == "LanceDBStore":
        table = store._table(coll)  # type: ignore[attr-defined]
        kinds = {tuple(ix.columns): ix.index_type for ix in table.list_indices()}
        return str(kinds.get(("vector",), "none (exact scan)"))
    if name == "QdrantEdgeStore":
        info = store.root.shard(coll).info()  # type: ignore[attr-defined]
        return f"HNSW over {info.indexed_vectors_count} of {info.points_count} vectors, {info.segments_count} segments"
    if name.startswith("Chroma"):
        return "HNSW (hnswlib, built as it writes)"
    if name == "QdrantStore":
        return "exact scan (local mode has no index)" if store.path is not None else "HNSW"  # type: ignore[attr-defined]
    return "the store's own"


def run_one(name: str, n: int, queries: int, tmp: Path) -> dict | None:
    rows = make_rows(n)
    base_rss = rss_mib()
    servers: dict = {}
    store, folder = open_backend(name, tmp, servers)
    if store is None:
        return None
    try:
        coll = "bench"
        store.drop_collection(coll)
        store.ensure_collection(CollectionSpec(coll, DIM, entities=True))
        batch_s = []
        t0 = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            t = time.perf_counter()
            store.upsert(coll, rows[i : i + BATCH])
            batch_s.append(time.perf_counter() - t)
        write_s = time.perf_counter() - t0
        t = time.perf_counter()
        built = store.finalize(coll)
        index_s = time.perf_counter() - t
        assert store.count(coll) == len(rows)
        q = max(1, len(batch_s) // 4)
        out: dict = {
            "chunks": n, "write_s": write_s, "index_s": index_s, "chunks_per_s": n / write_s,
            "chunks_per_s_with_index": n / (write_s + index_s), "us_per_chunk": 1e6 * (write_s + index_s) / n,
            "last_over_first_quarter": (sum(batch_s[-q:]) / q) / (sum(batch_s[:q]) / q),
            "index": index_in_use(store, coll), "maintenance": built.describe(),
        }  # fmt: skip
        rng = np.random.default_rng(1)
        picks = rng.choice(len(rows), size=min(queries, n), replace=False)
        where = parse(FILTER)
        for mode in ("dense", "hybrid", "filtered"):
            lat, top1 = [], 0
            for i in picks:
                noisy = rows[i]["vector"] + rng.normal(scale=0.02, size=DIM).astype(np.float32)
                words = " ".join(rows[i]["text"].split()[:6]) + f" ref{i}"
                req = SearchRequest(vector=noisy, text=words, mode="hybrid" if mode == "hybrid" else "dense", top_k=10)
                if mode == "filtered":
                    req.where = where
                t = time.perf_counter()
                hits = store.search(coll, req)
                lat.append(time.perf_counter() - t)
                wanted = mode != "filtered" or (i % 3 == 0 and i % 20 < 5)
                top1 += wanted and bool(hits) and hits[0].id == rows[i]["id"]
            out[mode] = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "top1": top1 / len(picks)}
        out["recall_at_10"] = recall_at_10(store, coll, rows, rng, min(queries, 100))
        out["reingest"] = {f"{frac:.0%}": reingest(store, coll, rows, frac, out) for frac in REINGEST}
        out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base_rss
        if "chroma" in servers:
            out["server_rss_mib"] = servers["chroma"].peak_rss_mib()
        out["disk_mib"] = disk_mib(folder)
        store.drop_collection(coll)
        return out
    finally:
        store.close()
        for s in servers.values():
            s.stop()


def recall_at_10(store: VectorStore, coll: str, rows: list[dict], rng: np.random.Generator, queries: int) -> float:
    """Dense top-10 against exact (brute-force cosine) top-10 over the stored vectors, for noisy copies of rows."""
    mat = np.stack([r["vector"] for r in rows])
    found = 0
    for i in rng.choice(len(rows), size=queries, replace=False):
        q = rows[i]["vector"] + rng.normal(scale=0.05, size=DIM).astype(np.float32)
        exact = {rows[j]["id"] for j in np.argsort(-(mat @ q))[:10]}
        found += len(exact & {h.id for h in store.search(coll, SearchRequest(vector=q, mode="dense", top_k=10))})
    return found / (10 * queries)


def reingest(store: VectorStore, coll: str, rows: list[dict], frac: float, fresh: dict) -> dict:
    """Re-write `frac` of the ids (new vectors and text, as an edited file's chunks) and finalize; cost per chunk
    against the fresh write's, with and without its index build, measured in this run."""
    rng = np.random.default_rng(int(frac * 1000))
    picks = rng.choice(len(rows), size=max(1, int(frac * len(rows))), replace=False)
    new = make_rows(len(rows), seed=int(frac * 1000) + 7)
    batch = [dict(new[i], id=rows[i]["id"], source=rows[i]["source"]) for i in sorted(picks)]
    t = time.perf_counter()
    for i in range(0, len(batch), BATCH):
        store.upsert(coll, batch[i : i + BATCH])
    upsert_s = time.perf_counter() - t
    t = time.perf_counter()
    done = store.finalize(coll)
    final_s = time.perf_counter() - t
    assert store.count(coll) == len(rows)
    per = 1e6 * (upsert_s + final_s) / len(batch)
    write_only, with_index = 1e6 * fresh["write_s"] / len(rows), fresh["us_per_chunk"]
    hit = store.search(coll, SearchRequest(vector=batch[0]["vector"], mode="dense", top_k=1))
    return {
        "chunks": len(batch), "upsert_s": upsert_s, "finalize_s": final_s, "us_per_chunk": per,
        "vs_fresh_write": per / write_only, "vs_fresh_write_and_index": per / with_index,
        "maintenance": done.describe(), "finds_rewritten": bool(hit) and hit[0].id == batch[0]["id"],
    }  # fmt: skip


def child(name: str, n: int, queries: int) -> dict | None:
    """One backend at one size in a fresh process: its memory and files are its own."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        cmd = [sys.executable, __file__, "--one", name, "--sizes", str(n), "--queries", str(queries), "--tmp", tmp]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::FutureWarning"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(f"{name} at {n}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
        got: dict | None = json.loads(proc.stdout.strip().splitlines()[-1])
        return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--backends", default=",".join(ALL))
    ap.add_argument("--max-local-mode", type=int, default=10_000, help="largest size qdrant-local runs at (it is slow)")
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs per backend and size; the one that wrote fastest is kept"
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.one:
        print(json.dumps(run_one(args.one, sizes[0], args.queries, Path(args.tmp))))
        return
    results: dict[str, dict[int, dict]] = {}
    for n in sizes:
        for name in args.backends.split(","):
            if name == "qdrant-local" and n > args.max_local_mode:
                continue
            runs = [child(name, n, args.queries) for _ in range(args.repeat)]
            done = [x for x in runs if x is not None and "error" not in x]
            r = max(done, key=lambda x: x["chunks_per_s"]) if done else runs[0]
            if r is not None and args.repeat > 1:
                r["chunks_per_s_runs"] = [x["chunks_per_s"] for x in done]
            if r is None:
                print(f"{name:13s} skipped (no server URL set)")
                continue
            results.setdefault(name, {})[n] = r
            print(f"{name:13s} {n:>8d} done", flush=True)
    report(results, sizes, args.queries)


def report(results: dict[str, dict[int, dict]], sizes: list[int], queries: int) -> None:
    print(f"\n{DIM}-d chunks in batches of {BATCH}; {queries} queries per mode; filter {' & '.join(FILTER)}")
    head = f"{'backend':13s} {'chunks':>8s} {'write/s':>8s} {'+index/s':>8s} {'cost x':>7s} {'q4/q1':>6s} {'dense p50/p99':>14s} {'hybrid p50/p99':>15s} {'filter p50/p99':>15s} {'RSS MiB':>8s} {'disk MiB':>8s}  index"  # noqa: E501
    print(head)
    for name, by_size in results.items():
        small = by_size.get(min(by_size)) or {}
        for n, r in sorted(by_size.items()):
            if "error" in r:
                print(f"{name:13s} {n:>8d} failed: {r['error'][:80]}")
                continue
            cost = r["us_per_chunk"] / small["us_per_chunk"] if "us_per_chunk" in small else float("nan")
            r["cost_per_chunk_vs_smallest"] = cost
            lat = "".join(f" {r[m]['p50_ms']:7.1f}/{r[m]['p99_ms']:<7.1f}" for m in ("dense", "hybrid", "filtered"))
            rss = r["rss_mib"] + r.get("server_rss_mib", 0.0)
            disk = f"{r['disk_mib']:8.0f}" if r.get("disk_mib") is not None else f"{'-':>8s}"
            print(f"{name:13s} {n:>8d} {r['chunks_per_s']:8.0f} {r['chunks_per_s_with_index']:8.0f} {cost:7.2f}"
                  f" {r['last_over_first_quarter']:6.2f}"
                  f"{lat} {rss:8.0f} {disk}  {r['index']}")  # fmt: skip
    for n in sizes:
        base = results.get("lancedb", {}).get(n)
        edge, legacy = results.get("qdrant-edge", {}).get(n), results.get("qdrant-local", {}).get(n)
        if edge and legacy and "error" not in edge and "error" not in legacy:
            print(f"\nat {n}: Qdrant Edge writes {edge['chunks_per_s'] / legacy['chunks_per_s']:.0f}x the chunks/s of "
                  f"local mode, hybrid p50 {legacy['hybrid']['p50_ms'] / edge['hybrid']['p50_ms']:.0f}x faster")  # fmt: skip
        if base and edge and "error" not in base and "error" not in edge:
            print(f"at {n}: Qdrant Edge vs LanceDB: writes x{edge['chunks_per_s'] / base['chunks_per_s']:.2f}, "
                  f"hybrid p50 x{edge['hybrid']['p50_ms'] / base['hybrid']['p50_ms']:.2f}")  # fmt: skip
    print("\nre-ingest: cost per re-written chunk (upserts + finalize) over the fresh write's (alone / with its index)")
    for name, by_size in results.items():
        for n, r in sorted(by_size.items()):
            for frac, x in (r.get("reingest") or {}).items():
                print(f"{name:16s} {n:>8d} {frac:>4s} {x['us_per_chunk']:8.0f} us  x{x['vs_fresh_write']:.2f} / "
                      f"x{x['vs_fresh_write_and_index']:.2f}  recall@10 {r['recall_at_10']:.3f}  {x['maintenance'][:90]}")  # fmt: skip
    out = ROOT / f"bench/results/{os.environ.get('BENCH_OUT', 'connectors')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"dim": DIM, "queries": queries, "sizes": sizes, "filter": FILTER, "results": results}
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
