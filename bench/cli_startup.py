"""CLI start-up: wall time of `shoal --help`, `shoal CMD --help`, `shoal models` and `shoal search` on the demo
store (median of N runs each), against `python -c pass` and `python -c "import torch"` in the same run, and
where one search spends its time. `shoal search` with a warm local `shoal serve --db` of the same store is
timed too, found by its discovery file (no option) and named with --url: the model stays loaded there, so the
command itself loads no model, no torch and no store driver. The goal printed beside the figures: a cold
search in at most 2 s on the 2-core reference machine.

    .venv/bin/python bench/cli_startup.py [--runs 5] [--db lancedb://./shoal-data]

The demo store is made by ./scripts/demo.sh (or `shoal ingest examples/docs`); without it the search rows are
skipped. Results go to bench/results/cli_startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERY = "What does error code E-417 mean?"

PHASES = """
import asyncio, json, sys, time
t = {"start": time.perf_counter()}
from pipeline.search import _search, collection_config
from pipeline.stores import open_existing
t["cli and pipeline imports"] = time.perf_counter()
store = open_existing(sys.argv[1])
t["store driver import and open"] = time.perf_counter()
cfg = collection_config(store, "chunks")
t["manifest and config"] = time.perf_counter()
from engine.runtime import AsyncEngine
t["engine import (torch)"] = time.perf_counter()
async def main():
    engine = await AsyncEngine().start()
    from pipeline.enrich import Enricher
    from pipeline.search import _encode
    await _encode(Enricher(engine, cfg), cfg.dense.model, "warm", "dense", {})
    t["model load and first query embedding"] = time.perf_counter()
    hits = await _search(store, cfg, "chunks", engine, sys.argv[2], None, None, "hybrid", 5, None)
    t["one search (embed + hybrid query)"] = time.perf_counter()
    await engine.close()
asyncio.run(main())
names = list(t)
print(json.dumps({b: round(t[b] - t[a], 3) for a, b in zip(names, names[1:])}))
"""


def run(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    r = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - started
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {r.stderr[-500:]}")
    return took


def median_of(n: int, args: list[str], env: dict[str, str]) -> float:
    return statistics.median(run(args, env) for _ in range(n))


def warm_search(a: argparse.Namespace, shoal: list[str], env: dict[str, str]) -> dict[str, float]:
    """Median wall times of `shoal search` beside a `shoal serve --db` started here (after one warm-up): found
    by the store's discovery file, and named with --url."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([*shoal, "serve", "--port", str(port), "--db", a.db, "--log-level", "warning"],
                              env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        found = [*shoal, "search", QUERY, "--db", a.db, "-k", "3"]
        named = [*found, "--url", url]
        run(named, env)  # the server loads its model on the first query
        return {
            "shoal search (warm local server found beside the store)": median_of(a.runs, found, env),
            "shoal search --url (warm local server, same store)": median_of(a.runs, named, env),
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--db", default="lancedb://./shoal-data")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cli_startup.json")
    a = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    shoal = [sys.executable, "-m", "shoal.cli"]
    cases = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        'python -c "import torch"': [sys.executable, "-c", "import torch"],
        "shoal --help": [*shoal, "--help"],
        "shoal search --help": [*shoal, "search", "--help"],
        "shoal ingest --help": [*shoal, "ingest", "--help"],
        "shoal models": [*shoal, "models"],
        "shoal models --json": [*shoal, "models", "--json"],
    }
    path = a.db.split("://", 1)[-1]
    have_store = (REPO / path).exists() or Path(path).exists()
    cold = "shoal search (cold, no server)"
    if have_store:
        cases[cold] = [*shoal, "search", QUERY, "--db", a.db, "-k", "3"]
    results: dict[str, float] = {}
    for name, args in cases.items():
        results[name] = median_of(a.runs, args, env)
    if have_store:
        results |= warm_search(a, shoal, env)
    base, torch_s = results["python -c pass (baseline)"], results['python -c "import torch"']
    print(f"| command | median of {a.runs} (s) | x python -c pass | x import torch |")
    print("| --- | --- | --- | --- |")
    for name, secs in results.items():
        print(f"| `{name}` | {secs:.3f} | {secs / base:.1f} | {secs / torch_s:.2f} |")
    if have_store:
        print(
            f"\ngoal: a cold `shoal search` in at most 2 s on the 2-core reference machine; here {results[cold]:.2f} s"
        )
    phases = {}
    if have_store:
        out = subprocess.run([sys.executable, "-c", PHASES, a.db, QUERY], env=env, cwd=REPO, capture_output=True,
                             text=True, check=True)  # fmt: skip
        phases = json.loads(out.stdout.strip().splitlines()[-1])
        total = sum(phases.values())
        print("\none search, by phase (one run):\n\n| phase | s | share |\n| --- | --- | --- |")
        for k, v in phases.items():
            print(f"| {k} | {v:.2f} | {v / total:.0%} |")
    else:
        print(f"\nno store at {a.db}: run ./scripts/demo.sh first for the search rows")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"runs": a.runs, "median_s": results, "search_phases_s": phases}, indent=2))


if __name__ == "__main__":
    main()
