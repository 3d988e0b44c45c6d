"""The score handler: rank candidates against a query with a cross-encoder, a yes/no LM or MaxSim.

Cross-encoders read each (query, candidate) pair in one sequence; late-interaction models encode the
query and each candidate separately and compare token vectors. Either way every sequence of every
task shares the same packed batches.
"""

from __future__ import annotations

import torch

from engine.errors import InputTooLong, InvalidInput
from engine.model.heads import maxsim_scores
from engine.model.packed import PackedModel
from engine.model.readout import OutputSpec, Readout
from engine.model.sequences import Encoded
from engine.tasks.results import ScoreEntry, ScoreReply
from engine.tasks.task import ScoreParams, Task
from engine.worker.batching import BatchHook, BatchLimits, run_packed
from engine.worker.handlers.base import TaskHandler, params_of, usage


def prompts(model: PackedModel, p: ScoreParams, docs: list[str]) -> list[Encoded]:
    """Qwen3-Reranker style: prefix + template(instruction, query, document) + suffix, the middle truncated."""
    spec = model.card.score
    assert spec is not None
    prefix, suffix = model.tokenizer.plain([spec.prefix, spec.suffix])
    room = model.max_len - len(prefix) - len(suffix)
    bodies = [spec.template.format(instruction=p.instruction, query=p.query, document=d) for d in docs]
    out = []
    for i, body in enumerate(model.tokenizer.plain(bodies)):
        if len(body) > room and not p.truncate:
            raise InputTooLong(f"item {i} is longer than the model's {model.max_len} tokens and truncation is off")
        out.append(Encoded(prefix + body[:room] + suffix))
    return out


def score_inputs(model: PackedModel, task: Task) -> list[Encoded]:
    """One sequence per pair, or (MaxSim) the query then each candidate."""
    spec = model.card.score
    if spec is None:
        raise InvalidInput(f"model {model.card.id!r} cannot score")
    p = params_of(task, ScoreParams)
    docs = [item.text for item in task.items]
    if spec.kind == "maxsim":
        query = model.encode_texts([p.query], p.truncate, is_query=True)
        return query + model.encode_texts([p.document_prefix + d for d in docs], p.truncate, is_query=False)
    if spec.kind == "yes_no":
        return prompts(model, p, docs)
    return model.encode_pairs([(p.query, d) for d in docs], p.truncate)


def ranked(task: Task, values: list[float]) -> list[ScoreEntry]:
    """[{item_id, score, rank}], best first; `item-<i>` for items without an id."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    return [
        {"item_id": task.items[i].id or f"item-{i}", "score": float(values[i]), "rank": rank}
        for rank, i in enumerate(order)
    ]


class ScoreHandler(TaskHandler[PackedModel, list[Encoded], Readout, ScoreReply]):
    """Relevance of each candidate to the query, ranked."""

    kind = "score"
    model_type = PackedModel

    def prepare(self, model: PackedModel, task: Task) -> list[Encoded]:
        encoded = score_inputs(model, task)
        adapter = params_of(task, ScoreParams).adapter
        if adapter:
            model.use_adapter(adapter)  # loaded and checked now: a bad adapter fails only this task
            for e in encoded:
                e.lora = adapter
        return encoded

    @torch.inference_mode()
    def run(
        self, model: PackedModel, work: list[tuple[Task, list[Encoded]]], limits: BatchLimits, on_batch: BatchHook
    ) -> list[Readout]:
        """Every task's scores (MaxSim: its query's and candidates' token vectors), from shared batches."""
        spec = model.card.score
        assert spec is not None  # prepare refused models that cannot score
        wanted = OutputSpec.of("multivector" if spec.kind == "maxsim" else "score")
        read = run_packed(model, [e for _, encoded in work for e in encoded], limits, wanted, on_batch)
        return read.split([len(encoded) for _, encoded in work])

    def finish(self, model: PackedModel, task: Task, prepared: list[Encoded], out: Readout) -> ScoreReply:
        """The candidates ranked by score (MaxSim of the query's token vectors against each candidate's)."""
        maxsim = model.card.score is not None and model.card.score.kind == "maxsim"
        values = maxsim_scores(out.multivector[0], out.multivector[1:]) if maxsim else out.score
        scores, used = ranked(task, values), usage(sum(len(e.ids) for e in prepared))
        query_id = params_of(task, ScoreParams).query_id
        if query_id is None:
            return {"scores": scores, "usage": used}
        return {"scores": scores, "query_id": query_id, "usage": used}
