"""docs/architecture.md's request path, true by test: one encode, one score and one extract round trip through
the real HTTP app (in process, tiny random-weight models) are traced, every call of an engine function with
the rooms on its call stack, and checked against the path the document draws.

Forward passes run on the process's compute thread (engine/model/threads.py), so the trace is set for every
thread started from now on (threading.setprofile), for this one (sys.setprofile), and on the compute thread
itself (a call run there sets it), whether or not an earlier test started it.

Each call from one room into another is also counted, per edge (caller's room, callee's room): a request may
cross one edge at most twice (down and back), except the edges listed in OVER_TWO, each at most its count.
"""

from __future__ import annotations

import contextlib
import dis
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from types import FrameType

import pytest
from fastapi.testclient import TestClient

from engine.build import build_app
from engine.config import EngineSettings
from engine.model import threads
from engine.tasks.results import JSONObject
from tests.test_architecture import ALLOWED, REPO, room
from tests.tiny_models import make, write_card

DENSE, CROSS = "tiny/path-dense", "tiny/path-cross-encoder"
SIDE = {"tasks", "catalogue", "residency", "base"}  # rooms used along the way, never a hop of the path
MAX_ROOMS = 8  # rooms one way may pass through, side rooms included
Chain = tuple[str, ...]  # the rooms on one call stack, outermost first, consecutive repeats collapsed
Edge = tuple[str, str]  # (caller's room, callee's room)
MAX_EDGE_CALLS = 2  # calls across one edge for one request: down, and back
# Edges one request still crosses more than twice, each with the most calls it may take (the worker still
# does part of the model's work: tokenising, packing and splitting are separate calls); lower these as the
# model seam takes them, never raise them.
OVER_TWO: dict[Edge, int] = {
    ("worker", "model"): 8,  # max_len, encode_texts/encode_pairs, OutputSpec.of, read_all, split, sentence_vectors
    ("model", "arch"): 5,  # PackedBatch.from_token_lists, num_tokens, the forward, pooling, normalising
    ("worker", "residency"): 4,  # resident, is_loaded, use
    ("runtime", "catalogue"): 4,  # Catalogue.get, check_serves
    ("runtime", "queue"): 3,  # depth, Admission.enter, Admission.leave
    ("worker", "tasks"): 3,  # Task.kind
}
RESUME = dis.opmap["RESUME"]


class Trace:
    """Every room chain seen while recording, with the modules of the first stack that showed it."""

    def __init__(self) -> None:
        self.recording = False
        self.chains: dict[Chain, tuple[str, ...]] = {}
        self.edges: Counter[Edge] = Counter()
        self.examples: dict[Edge, set[str]] = {}

    def clear(self) -> None:
        self.chains.clear()
        self.edges.clear()
        self.examples.clear()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.recording or event != "call" or not _ours(frame.f_globals.get("__name__", "")):
            return
        self._count(frame)
        rooms: list[str] = []
        modules: list[str] = []
        f: FrameType | None = frame
        while f is not None:
            name = f.f_globals.get("__name__", "")
            if _ours(name):
                modules.append(name)
                if not rooms or rooms[-1] != room(name):
                    rooms.append(room(name))
            f = f.f_back
        self.chains.setdefault(tuple(reversed(rooms)), tuple(dict.fromkeys(reversed(modules))))

    def _count(self, frame: FrameType) -> None:
        """One call across an edge: a fresh call (not a coroutine or generator resumed) whose nearest caller of
        ours is in another room."""
        if not _fresh(frame):
            return
        callee = room(frame.f_globals["__name__"])
        f = frame.f_back
        while f is not None and not _ours(f.f_globals.get("__name__", "")):
            f = f.f_back
        if f is None or (caller := room(f.f_globals["__name__"])) == callee or callee == "base":
            return  # base (settings, errors, codecs, timers) is the floor every room stands on, not a hop
        self.edges[(caller, callee)] += 1
        self.examples.setdefault((caller, callee), set()).add(frame.f_code.co_qualname)


def _fresh(frame: FrameType) -> bool:
    """A function entered at its start: RESUME 0 (a coroutine resumed after an await is RESUME with 1-3)."""
    code, at = frame.f_code.co_code, frame.f_lasti
    return at < 0 or (code[at] == RESUME and code[at + 1] == 0)


def _ours(module: str) -> bool:
    return module == "engine" or module.startswith("engine.")


def documented() -> tuple[set[Chain], set[tuple[str, str]]]:
    """The request path docs/architecture.md draws: its call paths (the numbered solid arrows, followed from
    each room no arrow enters) and the side rooms each room uses (the `---` lines)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    diagram = text.split("```mermaid", 1)[1].split("```", 1)[0]
    calls = [(a, b) for a, b in re.findall(r'^\s*(\w+) -- "\d+ [^"]*" --> (\w+)\s*$', diagram, re.M) if a in ALLOWED]
    side = set(re.findall(r"^\s*(\w+) --- (\w+)\s*$", diagram, re.M))
    starts = {a for a, _ in calls} - {b for _, b in calls}

    def paths(at: str) -> list[Chain]:
        nexts = [b for a, b in calls if a == at]
        return [(at, *rest) for b in nexts for rest in paths(b)] if nexts else [(at,)]

    return {p for s in starts for p in paths(s)}, side


def main_rooms(chain: Chain) -> Chain:
    out: list[str] = []
    for r in chain:
        if r not in SIDE and (not out or out[-1] != r):
            out.append(r)
    return tuple(out)


def within(part: Chain, whole: Chain) -> bool:
    """`part` is a run of consecutive rooms of `whole`."""
    n = len(part)
    return any(whole[i : i + n] == part for i in range(len(whole) - n + 1))


def check(trace: Trace) -> None:
    """What the trace must show: no room re-entered, the drawn paths and no others, side rooms only where drawn."""
    paths, side = documented()
    assert paths and side, "docs/architecture.md draws no request path"
    problems = []
    for chain, modules in trace.chains.items():
        if len(set(chain)) != len(chain):
            problems.append(f"a room re-entered: {' -> '.join(chain)} ({' -> '.join(modules)})")
        main = main_rooms(chain)
        if main and not any(within(main, p) for p in paths):
            problems.append(f"a path the document does not draw: {' -> '.join(main)} ({' -> '.join(modules)})")
        for caller, used in zip(chain, chain[1:], strict=False):
            if used in SIDE and (caller, used) not in side:
                problems.append(f"{caller} uses {used}, which the document does not draw ({' -> '.join(modules)})")
    assert not problems, "\n".join(sorted(set(problems)))
    uses = {(a, b) for c in trace.chains for a, b in zip(c, c[1:], strict=False) if b in SIDE}
    assert uses == side, f"side rooms drawn but not used: {sorted(side - uses)}"
    mains = {main_rooms(c) for c in trace.chains}
    longest = {m for m in mains if m and not any(m != o and within(m, o) for o in mains)}
    assert longest == paths, f"the trace's paths {sorted(longest)} are not the document's {sorted(paths)}"
    for start in {p[0] for p in paths}:
        rooms = {r for c in trace.chains if c and c[0] == start for r in c}
        assert len(rooms) <= MAX_ROOMS, f"one way from {start} passes {len(rooms)} rooms: {sorted(rooms)}"
    check_edges(trace)


def check_edges(trace: Trace) -> None:
    """No edge crossed more often than it may be for one request."""
    over = [
        f"{a} -> {b}: {n} calls, at most {OVER_TWO.get((a, b), MAX_EDGE_CALLS)} ({', '.join(sorted(trace.examples[(a, b)]))})"
        for (a, b), n in sorted(trace.edges.items())
        if n > OVER_TWO.get((a, b), MAX_EDGE_CALLS)
    ]
    assert not over, "rooms calling each other too often for one request:\n" + "\n".join(over)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Trace]]:
    root = tmp_path_factory.mktemp("path")
    cards = root / "cards"
    make("bert", "Model", root / "dense")
    make("bert", "ForSequenceClassification", root / "ce", num_labels=1)
    base = {"family": "bert", "max_seq_len": 64, "profiles": {"default": {"max_batch_tokens": 4096}}}
    dense = {"tasks": ["encode", "extract"], "outputs": ["dense"], "pooling": "mean"}
    write_card(cards, {"id": DENSE, "source": {"path": str(root / "dense")}, **base, **dense})
    cross = {"tasks": ["score"], "outputs": ["score"], "pooling": "cls", "score": {"kind": "classifier"}}
    write_card(cards, {"id": CROSS, "source": {"path": str(root / "ce")}, **base, **cross})
    trace = Trace()
    threading.setprofile(trace)  # threads started from now on: the app's portal, a new compute thread
    sys.setprofile(trace)
    compute = threads.compute_thread()
    compute.submit(sys.setprofile, trace).result()  # the compute thread an earlier test may have started
    try:
        with TestClient(build_app(EngineSettings(model_dir=cards, offline=True))) as client:
            for path, body in CALLS.values():  # the models load now: the path checked is that of resident models
                assert client.post(path, json=body).status_code == 200
            yield client, trace
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        with contextlib.suppress(RuntimeError):  # shut down already when the app's engine, its last holder, closed
            compute.submit(sys.setprofile, None).result()


CALLS: dict[str, tuple[str, JSONObject]] = {  # one round trip of each task kind: path and body
    "encode": (f"/v1/encode/{DENSE}", {"items": [{"text": "the cat sat"}]}),
    "score": (f"/v1/score/{CROSS}", {"query": {"text": "a cat"}, "items": [{"text": "the cat sat"}]}),
    "extract": (f"/v1/extract/{DENSE}", {"items": [{"text": "the cat sat"}], "params": {"labels": ["cat"]}}),
}


@pytest.mark.parametrize("kind", sorted(CALLS))
def test_one_round_trip_follows_the_documented_path(kind: str, traced: tuple[TestClient, Trace]) -> None:
    client, trace = traced
    trace.clear()
    trace.recording = True
    try:
        path, body = CALLS[kind]
        reply = client.post(path, json=body)
    finally:
        trace.recording = False
    assert reply.status_code == 200, reply.text
    check(trace)


@pytest.mark.parametrize(
    "extra",
    [
        ("worker", "model", "worker"),  # a call back into the worker from the model
        ("worker", "model", "arch", "residency"),  # a side room where the document draws none
        ("http", "runtime", "client", "queue"),  # a room the document's path does not pass
    ],
)
def test_the_check_fails_on_a_reentry_or_an_undrawn_room(extra: Chain) -> None:
    """The documented path itself passes the check; with one more chain in the trace it fails."""
    paths, side = documented()
    trace = Trace()
    for p in paths:
        trace.chains[p] = p
    for user, used in side:
        trace.chains[(user, used)] = (user, used)
    check(trace)
    trace.chains[extra] = extra
    with pytest.raises(AssertionError):
        check(trace)


def test_the_edge_check_fails_on_a_third_call_across_an_edge() -> None:
    trace = Trace()
    trace.edges[("worker", "queue")] = MAX_EDGE_CALLS
    trace.examples[("worker", "queue")] = {"pull"}
    check_edges(trace)
    trace.edges[("worker", "queue")] += 1
    with pytest.raises(AssertionError, match="worker -> queue: 3 calls"):
        check_edges(trace)
