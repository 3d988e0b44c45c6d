"""GLiNER entities for many tasks at once: every window of every item of every task shares the same batches.

Each task is prepared alone (word split, token counts, windows; a bad task fails only itself). Then all
windows are sorted by length and cut into batches under the token budget (GLiNER pads a batch to its
longest row and computes the padding too, so a batch also closes before a row that would pad it by more
than one forward call costs), each batch is one call to the model, and each item's windows are merged back
into entities with character offsets into the item's own text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import InvalidInput
from engine.model.gliner_runtime import GlinerModel, Window, Word
from engine.model.loaded import LoadedModel
from engine.tasks.results import Entity, ExtractedItem
from engine.tasks.task import ExtractParams, Task
from engine.worker.batching import BatchHook, BatchLimits
from engine.worker.extraction.windows import Found, WordRange, merge, plan_windows

MIN_TEXT_TOKENS = 16  # the labels' prompt must leave at least this many tokens of text per window
# Padding tokens a batch may carry: about what one more forward call costs. On CPU a call's fixed cost is
# small and GLiNER's span layer is paid per padded word (a tiny GLiNER, 12-window pulls of mixed lengths:
# slack 64 runs 1.35x the windows per CPU-second of one padded batch per pull; see bench/extract.py). An
# accelerator's call costs far more than its padding: there the token budget alone cuts batches.
PAD_SLACK_CPU = 64


def pad_slack(device: str) -> int | None:
    """The padding a batch may carry on this device (None: no limit but the token budget)."""
    return PAD_SLACK_CPU if device == "cpu" else None


@dataclass
class ItemWindows:
    """One item: its text, its words with offsets, and the windows over them."""

    text: str
    words: list[Word]
    ranges: list[WordRange]


@dataclass
class TaskWindows:
    """What preparing one extract task gives: its items' windows, the prompt cost, the decoding switches."""

    items: list[ItemWindows]
    prompt: int
    window: Window  # labels and switches; its words are filled per window

    def rows(self) -> list[tuple[int, WordRange]]:
        return [(i, r) for i, item in enumerate(self.items) for r in item.ranges]


def prepare_entities(model: GlinerModel, task: Task, params: ExtractParams) -> TaskWindows:
    """Split each item into words and windows that fit the model with this task's labels."""
    prompt = model.prompt_tokens(params.labels)
    room = model.max_tokens - prompt
    if room < MIN_TEXT_TOKENS:
        raise InvalidInput(
            f"the {len(params.labels)} labels take {prompt} of the model's {model.max_tokens} tokens, leaving "
            f"{max(room, 0)} for text; send fewer or shorter labels"
        )
    words = [model.words(item.text) for item in task.items]
    counts = model.token_counts([w for ws in words for w, _, _ in ws])  # one tokenizer call for the task
    items, at = [], 0
    for text, ws in zip((it.text for it in task.items), words, strict=True):
        mine = counts[at : at + len(ws)]
        at += len(ws)
        items.append(ItemWindows(text, ws, plan_windows(mine, model.window_words, model.overlap_words, room)))
    window = Window([], params.labels, params.threshold, params.flat_ner, params.multi_label)
    return TaskWindows(items, prompt, window)


def padded_batches(costs: Sequence[int], limits: BatchLimits, slack: int | None = None) -> list[list[int]]:
    """Row indices, shortest first, in batches whose padded size (rows x longest) fits the token budget. With
    `slack`, a batch also closes before a row that would make it carry more than `slack` padding tokens (every
    row is padded to the batch's longest, and GLiNER computes the padding too): the padding a batch may carry
    is what one more forward call costs, so rows of very different lengths run apart."""
    order = sorted(range(len(costs)), key=costs.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0  # tokens of the rows in `current`
    for i in order:  # sorted ascending, so the newest row is the longest of its batch
        padded = (len(current) + 1) * costs[i]
        full = padded > limits.max_tokens or len(current) >= limits.max_items
        if current and (full or (slack is not None and padded - real - costs[i] > slack)):
            batches.append(current)
            current, real = [], 0
        current.append(i)
        real += costs[i]
    if current:
        batches.append(current)
    return batches


def _entity(item: ItemWindows, f: Found) -> Entity:
    start, end = item.words[f.start][1], item.words[f.end][2]
    return {"text": item.text[start:end], "label": f.label, "score": f.score, "start": start, "end": end}


def run_entities(
    model: GlinerModel, work: list[TaskWindows], limits: BatchLimits, on_batch: BatchHook
) -> list[list[list[Entity]]]:
    """Entities of every item of every task (task -> item -> entities), from shared batches."""
    rows = [(t, i, r) for t, tw in enumerate(work) for i, r in tw.rows()]
    costs = [work[t].prompt + r.tokens for t, _, r in rows]
    found: list[list[Found]] = [[] for _ in rows]
    for batch in padded_batches(costs, limits, pad_slack(model.device)):
        windows = []
        for k in batch:
            t, i, r = rows[k]
            base, item = work[t].window, work[t].items[i]
            words = [w for w, _, _ in item.words[r.first : r.last]]
            windows.append(Window(words, base.labels, base.threshold, base.flat_ner, base.multi_label))
        for k, spans in zip(batch, model.predict(windows), strict=True):
            found[k] = [Found(s.start, s.end, s.label, s.score) for s in spans]
        on_batch(len(batch), sum(costs[k] for k in batch))
    per_item: dict[tuple[int, int], list[tuple[int, list[Found]]]] = {}
    for (t, i, r), f in zip(rows, found, strict=True):
        per_item.setdefault((t, i), []).append((r.first, f))
    out: list[list[list[Entity]]] = []
    for t, tw in enumerate(work):
        w = tw.window
        entities = []
        for i, item in enumerate(tw.items):
            parts = per_item.get((t, i), [])
            # one window: GLiNER's own decoding, as it returned it; several: merged at the overlaps
            merged = parts[0][1] if len(parts) == 1 else merge(parts, w.flat_ner, w.multi_label)
            entities.append([_entity(item, f) for f in merged])
        out.append(entities)
    return out


def usage_tokens(work: TaskWindows) -> int:
    """Tokens a task's windows put through the model, prompts included."""
    return sum(work.prompt + r.tokens for _, r in work.rows())


def result_items(task: Task, entities: list[list[Entity]]) -> list[ExtractedItem]:
    """The wire items of an entities task."""
    return [
        {"id": item.id if item.id is not None else f"item-{i}", "entities": ents, "classifications": [], "data": {}}
        for i, (item, ents) in enumerate(zip(task.items, entities, strict=True))
    ]


def check_model(model: LoadedModel) -> GlinerModel:
    if not isinstance(model, GlinerModel):
        raise InvalidInput(f"model {model.card.id!r} is not a GLiNER model; it cannot extract entities")
    return model
