"""Scaling of the gateway's input path: decoding, the shape guard, parsing and the limit checks of one body,
from 1 to 8 MB, in MB/s per size, with the guard's node visits as a work count.

Everything the edge does to a body before it is queued (engine.wire.decode_body with its BodyLimits,
engine.tasks.requests.parse_encode, engine.tasks.annotate.encode_task) is timed on generated bodies of
each shape. A linear path keeps its MB/s as the body grows: the ratio column is the cost per MB at each
size over the cost per MB at the smallest, measured in the same run (about 1 for linear, 8 for
quadratic at 8 MB). The refused shapes (4 MiB of nils, one over-long list) are timed too: they are
refused at a header or a count, so their cost does not depend on the body's size.

    python -m bench.edge_scaling [--sizes 1,2,4,8] [--out bench/results/edge_scaling.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.errors import ShoalError
from engine.tasks.annotate import encode_task
from engine.tasks.requests import parse_encode
from engine.wire import BodyLimits, check_shape, decode_body, dumps_json, packb

ROOT = Path(__file__).resolve().parents[1]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
WORDS = [
    "the",
    "pump",
    "seal",
    "on",
    "valve",
    "four",
    "was",
    "replaced",
    "after",
    "a",
    "pressure",
    "drop",
    "of",
    "two",
    "bar",
]


def items_body(size: int, per_item: int = 2_000) -> dict[str, Any]:
    """An encode body of about `size` bytes of text, in items of `per_item` characters with ids and metadata."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(per_item // 5))[:per_item]
    n = max(1, size // per_item)
    items = [{"id": f"doc-{i}", "text": text, "metadata": {"source": f"f{i}.md", "page": i}} for i in range(n)]
    return {"items": items, "params": {"instruction": "passage: "}}


def count_visits(obj: Any) -> int:
    """Containers the shape guard looks at (its work count)."""
    stack, seen = [obj], 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            seen += 1
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            seen += 1
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return seen


def edge_work(settings: EngineSettings, card: Any) -> Callable[[bytes, str], Any]:
    limits = BodyLimits(settings.max_body_depth, max(settings.max_body_list, settings.max_items))

    def run(raw: bytes, ctype: str) -> Any:
        body = decode_body(raw, ctype, limits)
        return encode_task(card, parse_encode(body, settings.max_items), settings)

    return run


def timed(fn: Callable[[], Any], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        with contextlib.suppress(ShoalError):
            fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,2,4,8", help="body sizes in MB")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "edge_scaling.json")
    args = ap.parse_args()
    sizes = [int(float(s) * 1e6) for s in args.sizes.split(",")]
    settings = EngineSettings(max_items=1_000_000, max_request_tokens=10**9, max_body_bytes=1 << 30)
    card = Catalogue().get(MINILM)
    work = edge_work(settings, card)
    rows = []
    for codec, ctype, encode in (("json", "application/json", dumps_json), ("msgpack", "application/msgpack", packb)):
        base = None
        for size in sizes:
            body = items_body(size)
            raw = encode(body)
            seconds = timed(lambda raw=raw, ctype=ctype: work(raw, ctype))
            per_mb = seconds / (len(raw) / 1e6)
            base = base or per_mb
            visits = count_visits(body)
            rows.append({"shape": f"encode body ({codec})", "mb": len(raw) / 1e6, "seconds": seconds,
                         "mb_per_s": len(raw) / 1e6 / seconds, "ratio": per_mb / base, "guard_visits": visits})  # fmt: skip
    defaults = EngineSettings()
    guard = BodyLimits(defaults.max_body_depth, max(defaults.max_body_list, defaults.max_items))
    for n in (1 << 20, 4 << 20):
        nils = b"\x81\xa5items\xdd" + n.to_bytes(4, "big") + b"\xc0" * n
        seconds = timed(lambda nils=nils: decode_body(nils, "application/msgpack", guard))
        rows.append({"shape": "refused: array of nils", "mb": len(nils) / 1e6, "seconds": seconds,
                     "mb_per_s": len(nils) / 1e6 / seconds, "ratio": None, "guard_visits": 0})  # fmt: skip
    for n in (100_000, 400_000):
        nulls = b'{"items": [' + b",".join([b"null"] * n) + b"]}"
        seconds = timed(lambda nulls=nulls: check_shape(json.loads(nulls), guard))
        rows.append({"shape": "refused: JSON list of nulls", "mb": len(nulls) / 1e6, "seconds": seconds,
                     "mb_per_s": len(nulls) / 1e6 / seconds, "ratio": None, "guard_visits": 2})  # fmt: skip
    print(f"{'shape':<28} {'MB':>6} {'s':>8} {'MB/s':>8} {'cost/MB vs smallest':>20} {'guard visits':>13}")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        print(
            f"{r['shape']:<28} {r['mb']:>6.2f} {r['seconds']:>8.4f} {r['mb_per_s']:>8.1f} {ratio:>20} {r['guard_visits']:>13}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
