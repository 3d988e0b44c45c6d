"""Typed errors that carry a wire code, an HTTP status and an optional Retry-After."""

from __future__ import annotations


class ShoalError(Exception):
    """Any failure a user can cause or see; carries the API.md error code."""

    code = "INTERNAL"
    status = 500
    retry_after: float | None = None

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retry_after is not None:
            self.retry_after = retry_after

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class InvalidInput(ShoalError):
    code, status = "INVALID_INPUT", 400


class InputTooLong(InvalidInput):
    """An input over the model's length with truncation off (a 400 that sie-sdk maps to InputTooLongError)."""

    code = "INPUT_TOO_LONG"


class ModelNotFound(ShoalError):
    code, status = "MODEL_NOT_FOUND", 404


class PayloadTooLarge(ShoalError):
    code, status = "PAYLOAD_TOO_LARGE", 413


class UnsupportedMediaType(ShoalError):
    code, status = "UNSUPPORTED_MEDIA_TYPE", 415


class Unauthorized(ShoalError):
    code, status = "UNAUTHORIZED", 401


class Forbidden(ShoalError):
    code, status = "FORBIDDEN", 403


class RequestTimeout(ShoalError):
    code, status = "REQUEST_TIMEOUT", 408


class RateLimited(ShoalError):
    code, status, retry_after = "RATE_LIMITED", 429, 1.0


class ModelLoadFailed(ShoalError):
    code, status = "MODEL_LOAD_FAILED", 502


class ModelUnavailable(ShoalError):
    """The model is known but this server has no weights for it: not transient, so no Retry-After."""

    code, status = "MODEL_UNAVAILABLE", 503


class ModelLoading(ShoalError):
    code, status, retry_after = "MODEL_LOADING", 503, 1.0


class QueueFull(ShoalError):
    code, status, retry_after = "QUEUE_FULL", 503, 1.0


class NoWorker(ShoalError):
    """Distributed mode: no worker pulls this model's tasks from the queue (none running, or none allowed it)."""

    code, status, retry_after = "NO_WORKER", 503, 2.0


class ResourceExhausted(ShoalError):
    code, status, retry_after = "RESOURCE_EXHAUSTED", 503, 1.0


class DeadlineExceeded(ShoalError):
    code, status = "DEADLINE_EXCEEDED", 504


class InternalError(ShoalError):
    code, status = "INTERNAL", 500


class Unreachable(ShoalError):
    """Client side: the server did not answer (refused, timed out, name unknown); never sent by a server."""

    code, status, retry_after = "UNREACHABLE", 503, 1.0


ERRORS_BY_CODE: dict[str, type[ShoalError]] = {
    cls.code: cls
    for cls in (
        InvalidInput,
        InputTooLong,
        ModelNotFound,
        PayloadTooLarge,
        Unauthorized,
        Forbidden,
        RequestTimeout,
        RateLimited,
        ModelLoadFailed,
        ModelUnavailable,
        ModelLoading,
        QueueFull,
        ResourceExhausted,
        DeadlineExceeded,
        InternalError,
        Unreachable,
    )
}


def error_from_code(code: str, message: str, retry_after: float | None = None) -> ShoalError:
    """Rebuild a typed error from its wire code (used by clients and queue results)."""
    return ERRORS_BY_CODE.get(code, InternalError)(message, retry_after=retry_after)
