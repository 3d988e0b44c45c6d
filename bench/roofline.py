"""Roofline: how close shoal's encode gets to what this machine's matrix units can do, per precision.

One run, on the encode corpus (bench/data/passages.jsonl) with all-MiniLM-L6-v2:

- useful FLOPs of the corpus from the model's config (engine/arch/flops.py: linear layers plus attention over
  real tokens only);
- the dense matmul peak of every precision in use, measured here with the model's own layer shapes at its
  token budget (bench/roofline_parts.py);
- sentence-transformers fp32 `encode(batch_size=32)`, shoal in-process and shoal over HTTP, in float32 and in
  every reduced precision this CPU offers, the reduced ones after their quality gate (engine/residency/gate.py);
  shoal's default (a fresh profile store, nothing tuned: the engine picks its precision itself); and the peers
  (bench/roofline_peers.py: sentence-transformers bf16, ONNX Runtime fp32 and int8, OpenVINO), each with its
  cosine to sentence-transformers fp32; rounds interleave the systems so load from other jobs hits all alike;
- achieved useful FLOP/s as a share of the peak; where the time goes, from the engine's own stage timers;
  one-sentence HTTP latency minus inference time; and a PNG plot with the rooflines marked.

    .venv/bin/python bench/roofline.py [--threads 2] [--rounds 3] [--limit N] [--plot docs/roofline.png]

Results: bench/results/roofline.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from bench import load_corpus  # noqa: E402
from bench.roofline_parts import (  # noqa: E402
    MODEL,
    HttpClients,
    MatmulPeak,
    delta,
    one_sentence_latency,
    plot,
    stage_seconds_local,
    stage_seconds_remote,
)

SENTENCE = "How do I keep a small embedding model fast on a CPU?"
TARGETS = {
    "fp32_of_peak": 0.80,
    "fp32_vs_st": 1.4,
    "reduced_vs_st": 2.5,
    "http_overhead_ms": 3.0,
    "http_vs_inproc": 0.9,
    "default_vs_fastest_peer": 1.5,
    "default_min_cosine": 0.99,
    "default_mean_cosine": 0.995,
    "bfloat16_of_peak": 0.65,
    "int8_of_peak": 0.80,
}
LABELS = {"st": "sentence-transformers", "inproc": "shoal in-process", "http": "shoal HTTP"}


def gate_profiles(precisions: list[str], store: Path) -> dict[str, dict[str, Any]]:
    """Each reduced precision through the quality gate against float32; the ones that pass get a stored profile
    (what `shoal tune` would store), so an engine pointed at `store` loads them."""
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model
    from engine.residency.gate import run_gate
    from engine.residency.store import ProfileStore

    card = Catalogue().get(MODEL)
    reference = load_model(card, "cpu", precision="float32")
    gates = {}
    for name in precisions:
        if name == "float32":
            continue
        gates[name] = run_gate(reference, reference.variant(name)).as_dict()
        if gates[name]["passed"]:
            profile = card.profiles["default"].model_copy(update={"dtype": name})
            ProfileStore(store / f"{name}.json").put(card.id, "cpu", profile, {"gates": {name: gates[name]}})
    return gates


class Systems:
    """Every system under test, loaded once; `run(name)` encodes the corpus once and returns (seconds, vectors)."""

    def __init__(
        self, texts: list[str], threads: int, precisions: list[str], store: Path, http: bool, peers: bool
    ) -> None:
        from sentence_transformers import SentenceTransformer

        import shoal
        from tests.helpers import LiveServer, minilm_dir

        self.texts = texts
        self.st = SentenceTransformer(str(minilm_dir()), device="cpu")
        self.engines: dict[str, Any] = {}
        self.servers: dict[str, Any] = {}
        self.clients: dict[str, HttpClients] = {}
        for name in precisions:
            path = store / f"{name}.json"  # float32: no stored profile, the card's own, and no auto-tune
            pinned = name == "float32"  # else its first load would tune it into another precision
            self.engines[name] = shoal.Engine(
                threads=threads, max_items=len(texts), profile_store=path, auto_tune=not pinned
            )
            if http:
                env = {"SHOAL_THREADS": str(threads), "SHOAL_PROFILE_STORE": str(path)}
                env |= {"SHOAL_AUTO_TUNE": "0"} if pinned else {}
                self.servers[name] = LiveServer(env=env).wait_ready()
                self.clients[name] = HttpClients(self.servers[name].url)
        self.peers: dict[str, Any] = {}
        if peers:
            from bench.roofline_peers import ShoalDefault, make_peers

            work = Path(tempfile.mkdtemp(prefix="shoal-peers-"))
            self.peers = make_peers(minilm_dir(), self.st.max_seq_length, threads, work)
            self.peers["default"] = ShoalDefault(MODEL, threads, len(texts), texts)
        self.run("st", warm=True)
        for name in self.peers:
            self.run(name, warm=True)
        for name in precisions:
            self.run(f"inproc:{name}", warm=True)
            if http:
                self.run(f"http:{name}", warm=True)

    def names(self) -> list[str]:
        inproc, http = [f"inproc:{p}" for p in self.engines], [f"http:{p}" for p in self.servers]
        return ["st", *inproc, *http, *self.peers]

    def run(self, name: str, warm: bool = False) -> tuple[float, np.ndarray]:
        texts = self.texts[:64] if warm else self.texts
        kind, _, precision = name.partition(":")
        started = time.perf_counter()
        if name in self.peers:
            vecs = self.peers[name].encode(texts)
        elif kind == "st":
            vecs = self.st.encode(texts, batch_size=32, convert_to_numpy=True)
        elif kind == "inproc":
            vecs = np.stack([r["dense"] for r in self.engines[precision].encode(MODEL, texts)])
        else:
            vecs = self.clients[precision].encode(texts)
        return time.perf_counter() - started, vecs

    def stages(self, name: str) -> dict[str, float]:
        kind, _, precision = name.partition(":")
        if name in self.peers:
            return {}
        return stage_seconds_remote(self.servers[precision].url) if kind == "http" else stage_seconds_local()

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        for client in self.clients.values():
            client.close()
        for server in self.servers.values():
            server.stop()
        if "default" in self.peers:
            self.peers["default"].close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each system's best and median count")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N passages")
    ap.add_argument(
        "--precisions", default=None, help="comma-separated (default: all this CPU offers); float32 always runs"
    )
    ap.add_argument("--no-http", action="store_true", help="skip the HTTP systems and the latency check")
    ap.add_argument("--no-peers", action="store_true", help="skip the peers and shoal's untuned default")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "roofline.png")
    ap.add_argument("--replot", action="store_true", help="only redraw the plot from bench/results/roofline.json")
    args = ap.parse_args()
    if args.replot:
        replot(ROOT / "bench" / "results" / "roofline.json", args.plot)
        return

    import torch

    torch.set_num_threads(args.threads)
    from engine.arch.flops import forward_flops
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model
    from engine.model.precision import available, cpu_features

    precisions = args.precisions.split(",") if args.precisions else available("cpu")
    precisions = ["float32", *(p for p in precisions if p != "float32")]  # the baseline every ratio needs
    texts = load_corpus(args.limit)
    card = Catalogue().get(MODEL)
    probe = load_model(card, "cpu", precision="float32")
    lengths = [len(ids) for ids in probe.tokenizer(texts, truncate=True)]
    flops = forward_flops(probe.config, lengths)
    budget = card.profiles["default"].max_batch_tokens
    peaks = {p: MatmulPeak(probe.config, p, budget) for p in dict.fromkeys([*precisions, *available("cpu")])}
    del probe

    store = Path(tempfile.mkdtemp(prefix="shoal-roofline-"))
    gates = gate_profiles(precisions, store)
    precisions = [p for p in precisions if p == "float32" or gates[p]["passed"]]
    systems = Systems(texts, args.threads, precisions, store, http=not args.no_http, peers=not args.no_peers)
    seconds: dict[str, list[float]] = {n: [] for n in systems.names()}
    stages: dict[str, dict[str, float]] = {n: {} for n in systems.names()}
    vectors: dict[str, np.ndarray] = {}
    try:
        for _ in range(args.rounds):
            for peak in peaks.values():
                peak.measure()
            for name in systems.names():
                before = systems.stages(name) if name != "st" else {}  # peers: none
                secs, vectors[name] = systems.run(name)
                seconds[name].append(secs)
                if name != "st":
                    for k, v in delta(systems.stages(name), before).items():
                        stages[name][k] = stages[name].get(k, 0.0) + v
            for peak in peaks.values():
                peak.measure()
        latency = {p: one_sentence_latency(s.url, SENTENCE) for p, s in systems.servers.items()}
    finally:
        systems.close()

    labels = {k: (p.label, p.precision) for k, p in systems.peers.items()}
    default_tune = getattr(systems.peers.get("default"), "tune_seconds", None)
    report = summarise(texts, lengths, flops, peaks, gates, seconds, stages, vectors, latency, args, labels)
    report["default_tune_seconds"] = default_tune
    out = ROOT / "bench" / "results" / "roofline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print_report(report)
    roofs = {p: peaks[p].best / (flops.total / len(texts)) for p in precisions}
    title = f"all-MiniLM-L6-v2, {len(texts)} passages, {args.threads} CPU threads ({', '.join(sorted(cpu_features()))})"
    report["plot_title"] = title
    out.write_text(json.dumps(report, indent=2))
    plot(report["systems"], roofs, args.plot, title)
    print(f"wrote {out} and {args.plot}")


def replot(results: Path, path: Path) -> None:
    """Draw the plot again from a stored run (the rooflines from its peaks and useful work per passage)."""
    r = json.loads(results.read_text())
    per_passage = r["useful_gflop"]["total"] / r["passages"]
    roofs = {p: peak / per_passage for p, peak in r["matmul_peak_gflop_per_s"].items()}
    title = r.get("plot_title") or f"all-MiniLM-L6-v2, {r['passages']} passages, {r['threads']} CPU threads"
    plot(r["systems"], roofs, path, title)
    print(f"wrote {path}")


def summarise(
    texts: list[str],
    lengths: list[int],
    flops: Any,
    peaks: dict[str, MatmulPeak],
    gates: dict[str, dict[str, Any]],
    seconds: dict[str, list[float]],
    stages: dict[str, dict[str, float]],
    vectors: dict[str, np.ndarray],
    latency: dict[str, dict[str, float]],
    args: argparse.Namespace,
    labels: dict[str, tuple[str, str]],
) -> dict[str, Any]:
    st_best = min(seconds["st"])
    rows = []
    for name, secs in seconds.items():
        kind, _, precision = name.partition(":")
        system, precision = labels.get(name) or (LABELS[kind], precision or "float32")
        best = min(secs)
        peak = peaks[precision].best if precision in peaks else None
        got, ref = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (vectors[name], vectors["st"]))
        cosines = np.sum(got * ref, axis=1)  # normalised here: a bf16 vector's norm is off by a few 1e-4
        rows.append(
            {
                "system": system,
                "key": name,
                "precision": precision,
                "seconds_best": best,
                "seconds_median": statistics.median(secs),
                "spread": max(secs) / best,
                "passages_per_s": len(texts) / best,
                "tokens_per_s": flops.tokens / best,
                "useful_gflop_per_s": flops.total / best / 1e9,
                "fraction_of_peak": flops.total / best / peak if peak else None,
                "vs_st": st_best / best,
                "vs_st_median": statistics.median(seconds["st"]) / statistics.median(secs),
                "mean_cosine_to_st": float(np.mean(cosines)),
                "min_cosine_to_st": float(np.min(cosines)),
                "gate": gates.get(precision),
                "stages_s": stages.get(name) or None,
                "stages_share": {k: v / sum(secs) for k, v in (stages.get(name) or {}).items()} or None,
            }
        )
    by_key = {r["key"]: r for r in rows}
    reduced = [r for r in rows if r["system"] == "shoal in-process" and r["precision"] != "float32"]
    best_reduced = max(reduced, key=lambda r: r["vs_st"]) if reduced else None
    fp32 = by_key["inproc:float32"]
    peers = [r for k, r in by_key.items() if k.split(":")[0] in ("st", "ort", "openvino")]
    fastest_peer = max(peers, key=lambda r: r["passages_per_s"])
    default = by_key.get("default")
    inproc = {r["precision"]: r for r in rows if r["system"] == "shoal in-process"}
    over_http = [
        inproc[r["precision"]]["seconds_best"] / r["seconds_best"] for r in rows if r["system"] == "shoal HTTP"
    ]
    checks = {
        "default_vs_fastest_peer": default["passages_per_s"] / fastest_peer["passages_per_s"] if default else None,
        "default_min_cosine": default["min_cosine_to_st"] if default else None,
        "default_mean_cosine": default["mean_cosine_to_st"] if default else None,
        "bfloat16_of_peak": inproc["bfloat16"]["fraction_of_peak"] if "bfloat16" in inproc else None,
        "int8_of_peak": inproc["int8"]["fraction_of_peak"] if "int8" in inproc else None,
        "fp32_of_peak": fp32["fraction_of_peak"],
        "fp32_vs_st": fp32["vs_st"],
        "reduced_vs_st": best_reduced["vs_st"] if best_reduced else None,
        "http_overhead_ms": latency["float32"]["overhead_p50_ms"] if "float32" in latency else None,
        "http_vs_inproc": min(over_http) if over_http else None,
    }
    met = {
        k: (None if v is None else (v <= TARGETS[k] if k == "http_overhead_ms" else v >= TARGETS[k]))
        for k, v in checks.items()
    }
    return {
        "model": MODEL,
        "passages": len(texts),
        "tokens": flops.tokens,
        "mean_tokens": flops.tokens / len(texts),
        "threads": args.threads,
        "rounds": args.rounds,
        "useful_gflop": {"linear": flops.linear / 1e9, "attention": flops.attention / 1e9, "total": flops.total / 1e9},
        "matmul_peak_gflop_per_s": {p: m.best / 1e9 for p, m in peaks.items()},
        "gates": gates,
        "systems": rows,
        "http_one_sentence": latency,
        "targets": TARGETS,
        "checks": checks,
        "met": met,
        "best_reduced": best_reduced["precision"] if best_reduced else None,
        "fastest_peer": fastest_peer["key"],
        "default_precision": default["precision"] if default else None,
    }


def print_report(r: dict[str, Any]) -> None:
    g = r["useful_gflop"]
    print(
        f"\n{r['model']}: {r['passages']} passages, {r['tokens']} real tokens ({r['mean_tokens']:.0f} a passage), "
        f"{r['threads']} threads, {r['rounds']} interleaved rounds"
    )
    print(f"useful work: {g['total']:.1f} GFLOP ({g['linear']:.1f} linear, {g['attention']:.1f} attention)")
    peaks = ", ".join(f"{p} {v:.1f} GFLOP/s" for p, v in r["matmul_peak_gflop_per_s"].items())
    print(f"matmul peak with the model's layer shapes: {peaks}")
    for name, gate in r["gates"].items():
        verdict = "passed" if gate["passed"] else "FAILED"
        print(
            f"gate {name}: mean cosine {gate['mean_cosine']:.4f} (min {gate['min_cosine']:.4f}), nDCG@10 "
            f"{gate['ndcg_at_10']:.4f} vs float32 {gate['reference_ndcg_at_10']:.4f} (drop {gate['ndcg_drop']:.4f}): "
            f"{verdict}"
        )
    head = f"{'system':<44} {'precision':<9} {'passages/s':>10} {'GFLOP/s':>8} {'of peak':>8} {'vs ST':>6} {'(median)':>8} {'spread':>7} {'cos ST':>8} {'min':>8}"
    print("\n" + head)
    for s in r["systems"]:
        share = "-" if s["fraction_of_peak"] is None else f"{s['fraction_of_peak'] * 100:.1f}%"
        print(
            f"{s['system']:<44} {s['precision']:<9} {s['passages_per_s']:>10.1f} {s['useful_gflop_per_s']:>8.1f} "
            f"{share:>8} {s['vs_st']:>5.2f}x {s['vs_st_median']:>7.2f}x {s['spread']:>6.2f}x "
            f"{s['mean_cosine_to_st']:>8.5f} {s['min_cosine_to_st']:>8.5f}"
        )
    if r.get("default_precision"):
        print(
            f"shoal default picked {r['default_precision']} (first load + background tune: {r['default_tune_seconds']:.1f} s)"
        )
    print("\nwhere the time goes (engine stage timers, share of the system's wall time):")
    for s in r["systems"]:
        if s["stages_share"]:
            shares = ", ".join(f"{k} {v * 100:.1f}%" for k, v in s["stages_share"].items() if v > 0)
            print(f"  {s['key']:<16} {shares}")
    for p, lat in r["http_one_sentence"].items():
        print(
            f"HTTP one sentence ({p}): p50 {lat['p50_ms']:.2f} ms, inference p50 {lat['inference_p50_ms']:.2f} ms, "
            f"overhead p50 {lat['overhead_p50_ms']:.2f} ms (p90 {lat['overhead_p90_ms']:.2f})"
        )
    print("\ntargets:")
    for k, v in r["checks"].items():
        want = r["targets"][k]
        state = {True: "met", False: "MISSED", None: "not measured"}[r["met"][k]]
        print(
            f"  {k:<24} {'-' if v is None else f'{v:.3f}':>8} (target {'<=' if k == 'http_overhead_ms' else '>='} {want}): {state}"
        )


if __name__ == "__main__":
    main()
