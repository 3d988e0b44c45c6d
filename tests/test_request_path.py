"""docs/architecture.md's request path, true by test: one encode, one score and one extract round trip through
the real HTTP app (in process, tiny random-weight models) are traced, every call of an engine function with
the rooms on its call stack, and checked against the path the document draws.

Forward passes run on the process's compute thread (engine/model/threads.py), so the trace is set for every
thread (threading.setprofile) as well as this one (sys.setprofile), before the app's threads and a fresh
compute thread start.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from types import FrameType

import pytest
from fastapi.testclient import TestClient

from engine.config import EngineSettings
from engine.http.app import create_app
from engine.model import threads
from engine.runtime import AsyncEngine
from engine.tasks.results import JSONObject
from tests.test_architecture import ALLOWED, REPO, room
from tests.tiny_models import make, write_card

DENSE, CROSS = "tiny/path-dense", "tiny/path-cross-encoder"
SIDE = {"tasks", "catalogue", "residency", "base"}  # rooms used along the way, never a hop of the path
MAX_ROOMS = 8  # rooms one way may pass through, side rooms included
Chain = tuple[str, ...]  # the rooms on one call stack, outermost first, consecutive repeats collapsed


class Trace:
    """Every room chain seen while recording, with the modules of the first stack that showed it."""

    def __init__(self) -> None:
        self.recording = False
        self.chains: dict[Chain, tuple[str, ...]] = {}

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.recording or event != "call" or not _ours(frame.f_globals.get("__name__", "")):
            return
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
    earlier = threads._compute  # an earlier test's compute thread started untraced: this one gets its own
    threads._compute = None
    threading.setprofile(trace)  # threads started from now on: the app's portal, the compute thread
    sys.setprofile(trace)
    try:
        with TestClient(create_app(AsyncEngine(EngineSettings(model_dir=cards, offline=True)))) as client:
            for path, body in CALLS.values():  # the models load now: the path checked is that of resident models
                assert client.post(path, json=body).status_code == 200
            yield client, trace
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        traced_thread, threads._compute = threads._compute, earlier
        if traced_thread is not None:
            traced_thread.shutdown(wait=False)


CALLS: dict[str, tuple[str, JSONObject]] = {  # one round trip of each task kind: path and body
    "encode": (f"/v1/encode/{DENSE}", {"items": [{"text": "the cat sat"}]}),
    "score": (f"/v1/score/{CROSS}", {"query": {"text": "a cat"}, "items": [{"text": "the cat sat"}]}),
    "extract": (f"/v1/extract/{DENSE}", {"items": [{"text": "the cat sat"}], "params": {"labels": ["cat"]}}),
}


@pytest.mark.parametrize("kind", sorted(CALLS))
def test_one_round_trip_follows_the_documented_path(kind: str, traced: tuple[TestClient, Trace]) -> None:
    client, trace = traced
    trace.chains.clear()
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
