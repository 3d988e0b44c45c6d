"""The msgpack messages of the NATS queue, typed: a work message (task + reply inbox) and its one answer."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from engine.errors import InternalError, ShoalError, error_from_code
from engine.tasks.checked import checked_reply
from engine.tasks.results import Reply
from engine.tasks.task import Task
from engine.wire import packb, unpackb


class Work(TypedDict):
    """What the gateway publishes to `shoal.work.<model>`: the task, and the inbox its answer goes to."""

    task: Task
    reply: str


class ErrorAnswer(TypedDict):
    """A failed task's error as the answer carries it."""

    code: str
    message: str
    retry_after: NotRequired[float | None]


class Answer(TypedDict):
    """A worker's answer on the reply inbox: the task's id and its result (with the task's kind, which says the
    result's type) or its error."""

    id: str
    kind: NotRequired[str]
    result: NotRequired[Reply]
    error: NotRequired[ErrorAnswer]


def pack_work(task: Task, reply: str) -> bytes:
    return packb({"task": task.to_wire(), "reply": reply})


def read_work(data: bytes) -> Work:
    """A work message as published (the task validated: a malformed message is an error, never a half-task)."""
    env = unpackb(data)
    if not isinstance(env, dict) or not isinstance(reply := env.get("reply"), str):
        raise InternalError("a work message is a map with 'task' and a 'reply' inbox")
    return {"task": Task.from_wire(env.get("task")), "reply": reply}


def error_answer(error: ShoalError) -> ErrorAnswer:
    answer: ErrorAnswer = {"code": error.code, "message": error.message}
    if error.retry_after is not None:
        answer["retry_after"] = error.retry_after
    return answer


def read_answer(data: bytes) -> Answer:
    """An answer as a worker packed it (NatsDelivery.ack / term); its result is checked against the reply type
    of its task's kind, and a malformed one becomes an INTERNAL error answer for the task that waits on it."""
    body = unpackb(data)
    if not isinstance(body, dict):
        raise InternalError("an answer is a map with the task's 'id'")
    task_id = body.get("id")
    answer: Answer = {"id": task_id if isinstance(task_id, str) else ""}  # no id: nobody waits for it
    if isinstance(error := body.get("error"), dict):
        code, message, retry = error.get("code"), error.get("message"), error.get("retry_after")
        answer["error"] = {"code": str(code), "message": str(message)}
        if isinstance(retry, int | float):
            answer["error"]["retry_after"] = float(retry)
    elif "result" in body:
        try:
            answer["result"] = checked_reply(str(body.get("kind")), body["result"], "a worker's answer")
        except ShoalError as e:
            answer["error"] = error_answer(e)
    else:
        answer["error"] = {"code": InternalError.code, "message": "a worker's answer has neither result nor error"}
    return answer


def answer_error(error: ErrorAnswer) -> ShoalError:
    """The typed error an error answer names."""
    return error_from_code(error["code"], error["message"], error.get("retry_after"))
