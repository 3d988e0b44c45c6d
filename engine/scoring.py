"""The score task on a worker: rank candidates against a query with a cross-encoder, a yes/no LM or MaxSim.

Cross-encoders read each (query, candidate) pair in one sequence; late-interaction models encode the
query and each candidate separately and compare token vectors. Either way every sequence of every
task shares the same packed batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from engine import outputs
from engine.batching import pack_by_budget
from engine.encoding import BatchHook
from engine.errors import InvalidInput, ModelLoadFailed, ShoalError
from engine.lora import task_adapter
from engine.queue import Task
from engine.runner import Encoded, LoadedModel

KindHook = Callable[[str, int, int, str], None]  # (model, items, tokens, task kind) of each forward batch


def _prompts(model: LoadedModel, query: str, docs: list[str], instruction: str | None, truncate: bool) -> list[Encoded]:
    """Qwen3-Reranker style: prefix + template(instruction, query, document) + suffix, the middle truncated."""
    spec = model.card.score
    assert spec is not None
    prefix, suffix = model.tokenizer.plain([spec.prefix, spec.suffix])
    room = model.tokenizer.max_len - len(prefix) - len(suffix)
    bodies = [spec.template.format(instruction=instruction or spec.instruction, query=query, document=d) for d in docs]
    out = []
    for i, body in enumerate(model.tokenizer.plain(bodies)):
        if len(body) > room and not truncate:
            raise InvalidInput(
                f"item {i} is longer than the model's {model.tokenizer.max_len} tokens and truncation is off"
            )
        out.append(Encoded(prefix + body[:room] + suffix))
    return out


def score_task_inputs(model: LoadedModel, task: Task) -> list[Encoded]:
    """The sequences one score task needs, each tagged with the task's LoRA adapter (if any)."""
    encoded = _score_sequences(model, task)
    adapter = task_adapter(model, task.params)  # loaded and checked here: a bad adapter fails only its task
    for e in encoded:
        e.lora = adapter
    return encoded


def _score_sequences(model: LoadedModel, task: Task) -> list[Encoded]:
    """One sequence per pair, or (MaxSim) the query then each candidate."""
    spec = model.card.score
    assert spec is not None
    query = task.params["query"]["text"]
    docs = [item["text"] for item in task.items]
    instruction = task.params.get("instruction")
    truncate = (task.params.get("options") or {}).get("truncate")
    truncate = model.card.truncate if truncate is None else truncate
    if spec.kind == "maxsim":
        q_prefix = instruction if instruction is not None else model.card.query_instruction or ""
        d_prefix = model.card.document_instruction or ""
        return model.encode_texts([q_prefix + query], truncate, is_query=True) + model.encode_texts(
            [d_prefix + d for d in docs], truncate, is_query=False
        )
    if spec.kind == "yes_no":
        return _prompts(model, query, docs, instruction, truncate)
    q = instruction + query if instruction else query
    return model.encode_pairs([(q, d) for d in docs], truncate)


def _yes_no_ids(model: LoadedModel) -> list[int] | None:
    spec = model.card.score
    if spec is None or spec.kind != "yes_no":
        return None
    ids = [model.tokenizer.token_id(spec.yes_token), model.tokenizer.token_id(spec.no_token)]
    if None in ids:
        raise ModelLoadFailed(f"{model.card.id}: the tokenizer has no {spec.yes_token!r} / {spec.no_token!r} tokens")
    return [int(i) for i in ids if i is not None]


def _ranked(task: Task, values: list[float]) -> dict[str, Any]:
    order = sorted(range(len(values)), key=lambda i: -values[i])
    scores = []
    for rank, i in enumerate(order):
        item_id = task.items[i].get("id") or f"item-{i}"
        scores.append({"item_id": item_id, "score": float(values[i]), "rank": rank})
    result: dict[str, Any] = {"scores": scores}
    if task.params["query"].get("id") is not None:
        result["query_id"] = task.params["query"]["id"]
    return result


@torch.inference_mode()
def run_score(
    model: LoadedModel,
    tasks: list[Task],
    max_tokens: int,
    max_items: int,
    on_batch: BatchHook | None = None,
) -> list[dict[str, Any] | ShoalError]:
    """Ranked scores (or the error) of each task, in order; tasks share forward batches."""
    started = time.perf_counter()
    spec = model.card.score
    if spec is None:
        return [InvalidInput(f"model {model.card.id!r} cannot score")] * len(tasks)
    yes_no = _yes_no_ids(model)
    outcomes: list[dict[str, Any] | ShoalError] = [{} for _ in tasks]
    seqs: list[Encoded] = []
    spans: dict[int, tuple[int, int]] = {}  # task -> its sequences seqs[start:end]
    for t, task in enumerate(tasks):
        try:
            encoded = score_task_inputs(model, task)
        except ShoalError as e:
            outcomes[t] = e
            continue
        spans[t] = (len(seqs), len(seqs) + len(encoded))
        seqs.extend(encoded)
    tokenized = time.perf_counter()

    produced: list[Any] = [None] * len(seqs)  # a score per pair, or token vectors (MaxSim)
    for batch in pack_by_budget([len(s.ids) for s in seqs], max_tokens, max_items):
        group = [seqs[i] for i in batch]
        hidden, packed = model.forward(group)
        if spec.kind == "maxsim":
            values: list[Any] = outputs.multivector(model, hidden, packed, group)
        else:
            values = outputs.scores(model, hidden, packed, yes_no).tolist()
        if on_batch is not None:
            on_batch(model.card.id, len(batch), packed.num_tokens)
        for i, v in zip(batch, values, strict=True):
            produced[i] = v
    inferred = time.perf_counter()

    timing = {"tokenization_ms": (tokenized - started) * 1000, "inference_ms": (inferred - tokenized) * 1000}
    for t, (start, end) in spans.items():
        mine = produced[start:end]
        values = outputs.maxsim_scores(mine[0], mine[1:]) if spec.kind == "maxsim" else [float(v) for v in mine]
        tokens = sum(len(s.ids) for s in seqs[start:end])
        outcomes[t] = {**_ranked(tasks[t], values), "timing": dict(timing), "usage": {"input_tokens": tokens}}
    return outcomes


def run_tasks(
    model: LoadedModel, tasks: list[Task], max_tokens: int, max_items: int, on_batch: KindHook | None = None
) -> list[dict[str, Any] | ShoalError]:
    """Run a mixed list of encode and score tasks of one model; outcomes in the tasks' order."""
    from engine.encoding import run_encode

    outcomes: list[dict[str, Any] | ShoalError] = [{} for _ in tasks]
    for kind, runner in (("encode", run_encode), ("score", run_score)):
        idx = [i for i, t in enumerate(tasks) if t.kind == kind]
        if idx:
            hook = None if on_batch is None else _labelled(on_batch, kind)
            for i, o in zip(idx, runner(model, [tasks[i] for i in idx], max_tokens, max_items, hook), strict=True):
                outcomes[i] = o
    for i, t in enumerate(tasks):
        if t.kind not in ("encode", "score"):
            outcomes[i] = InvalidInput(f"task kind {t.kind!r} is not served by this worker")
    return outcomes


def _labelled(on_batch: KindHook, kind: str) -> BatchHook:
    """The hook with the task kind passed along (metrics count encode and score batches apart)."""
    return lambda model, items, tokens: on_batch(model, items, tokens, kind)
