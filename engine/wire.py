"""Body codecs: msgpack with numpy arrays in the msgpack-numpy convention, and JSON with plain lists."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import numpy as np

from engine.errors import InvalidInput

MSGPACK = "application/msgpack"
JSON = "application/json"
_MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")
_NUMERIC_KINDS = "biuf"


def _encode_numpy(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)  # (keeps a 0-d array 0-d)
        return {
            b"nd": True,
            b"type": arr.dtype.str,
            b"kind": b"",
            b"shape": list(arr.shape),
            b"data": arr.data.cast("B") if arr.size else b"",  # zero-copy: msgpack reads the buffer
        }
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _decode_numpy(obj: dict[Any, Any]) -> Any:
    if b"nd" not in obj and "nd" not in obj:
        return obj

    def get(key: str) -> Any:  # keys may be bytes or str
        return obj.get(key.encode(), obj.get(key))

    dtype = np.dtype(get("type"))
    if dtype.kind not in _NUMERIC_KINDS or get("kind") not in (b"", ""):
        raise InvalidInput("only numeric numpy arrays are accepted in msgpack bodies")
    data = get("data")
    if not get("nd"):
        return np.frombuffer(data, dtype=dtype, count=1)[0]
    return np.frombuffer(data, dtype=dtype).reshape(get("shape"))


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_decode_numpy, raw=False, strict_map_key=False)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def dumps_json(obj: Any) -> bytes:
    return json.dumps(obj, default=_jsonable, separators=(",", ":")).encode()


def is_msgpack(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in _MSGPACK_TYPES


def is_json(content_type: str | None) -> bool:
    base = (content_type or "").split(";")[0].strip().lower()
    return base == JSON or base.endswith("+json")


def decode_body(data: bytes, content_type: str | None) -> Any:
    """Parse a request body by its Content-Type; msgpack when none is given."""
    if not content_type or is_msgpack(content_type):
        try:
            return unpackb(data)
        except InvalidInput:
            raise
        except Exception as e:  # noqa: BLE001 - any decoder failure is the caller's malformed body
            raise InvalidInput(f"the body is not valid msgpack: {type(e).__name__}: {e}") from None
    if is_json(content_type):
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidInput(f"the body is not valid JSON: {e}") from None
    raise InvalidInput(f"unsupported Content-Type {content_type!r}; send application/msgpack or application/json")


def response_type(accept: str | None, request_type: str | None) -> str:
    """msgpack unless the client accepts only JSON, or sent JSON and did not ask for msgpack."""
    accept = (accept or "").lower()
    if any(t in accept for t in _MSGPACK_TYPES):
        return MSGPACK
    if JSON in accept or is_json(request_type):
        return JSON
    return MSGPACK


def encode_response(obj: Any, media_type: str) -> bytes:
    return packb(obj) if media_type == MSGPACK else dumps_json(obj)
