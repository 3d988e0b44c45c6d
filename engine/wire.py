"""Body codecs: msgpack with numpy arrays in the msgpack-numpy convention, and JSON with plain lists."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import msgpack
import numpy as np
import orjson

from engine.errors import InvalidInput, PayloadTooLarge

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


def unpackb(data: bytes, max_len: int = -1) -> Any:
    """msgpack to Python; with `max_len`, a longer array or map fails at its header (ValueError), before
    any of its entries is built."""
    return msgpack.unpackb(
        data,
        object_hook=_decode_numpy,
        raw=False,
        strict_map_key=False,
        max_array_len=max_len,
        max_map_len=max_len,
    )


class BodyLimits(NamedTuple):
    """How deep a request body may nest and how long any of its lists or maps may be."""

    depth: int
    length: int


def check_shape(obj: Any, limits: BodyLimits) -> None:
    """400 for nesting deeper than `limits.depth`, 413 for a list or map longer than `limits.length`; one
    pass, level by level, that checks a container's length before visiting its entries."""
    level, depth = [obj], 0
    while level:
        containers: list[Any] = []
        for node in level:
            kind = type(node)
            if kind is dict:
                entries: Any = node.values()
            elif kind is list:
                entries = node
            else:
                continue
            if len(node) > limits.length:
                raise PayloadTooLarge(
                    f"a list or map of {len(node):,} entries is over the limit of {limits.length:,} "
                    "(SHOAL_MAX_BODY_LIST)"
                )
            containers += [e for e in entries if type(e) is dict or type(e) is list]
        depth += 1
        if containers and depth >= limits.depth:
            raise InvalidInput(f"the body nests deeper than {limits.depth} levels (SHOAL_MAX_BODY_DEPTH)")
        level = containers


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _widened(obj: Any) -> Any:
    """`obj` with float arrays and scalars as float64, so that orjson writes each float as Python's json does
    (the shortest text that reads back as the same float64: a float32 0.1 stays 0.10000000149011612)."""
    if isinstance(obj, dict):
        return {k: _widened(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_widened(v) for v in obj]
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f" and obj.dtype != np.float64:
        return obj.astype(np.float64)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def dumps_json(obj: Any) -> bytes:
    """Compact JSON. orjson writes a 384-d vector about 25x faster than the standard library, which keeps the
    event loop free under load; what orjson refuses (integers past 64 bits, keys that are not strings) is
    written by the standard library, with the same text."""
    try:
        return orjson.dumps(_widened(obj), option=orjson.OPT_SERIALIZE_NUMPY)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(obj, default=_jsonable, separators=(",", ":")).encode()


def is_msgpack(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in _MSGPACK_TYPES


def is_json(content_type: str | None) -> bool:
    base = (content_type or "").split(";")[0].strip().lower()
    return base == JSON or base.endswith("+json")


def _not_json_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not a JSON number; send a finite number")


def loads_json(data: bytes | str) -> Any:
    """JSON to Python, every failure an InvalidInput in the caller's terms: where the syntax broke, bytes that
    are not UTF-8, integers past Python's 4,300-digit limit, and NaN or Infinity (not JSON)."""
    try:
        return json.loads(data, parse_constant=_not_json_constant)
    except RecursionError:
        raise InvalidInput("the JSON body nests too deeply") from None
    except json.JSONDecodeError as e:
        raise InvalidInput(f"the body is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except UnicodeDecodeError as e:
        raise InvalidInput(f"the body is not valid UTF-8 (byte {e.start}); JSON must be UTF-8") from None
    except ValueError as e:  # an integer too long to convert (sys.get_int_max_str_digits)
        if "digits" in str(e):
            raise InvalidInput("a number in the JSON body has more than 4,300 digits") from None
        raise InvalidInput("the body is not valid JSON") from None


def _msgpack_reason(e: Exception) -> str:
    """Why a msgpack body could not be read, without the decoder's exception names."""
    if isinstance(e, msgpack.ExtraData):
        return "it has bytes after its end"
    if isinstance(e, UnicodeDecodeError):
        return f"a string in it is not valid UTF-8 (byte {e.start} of that string)"
    if isinstance(e, TypeError):
        return "a map key in it is a list or map"
    text = str(e).strip()
    return text if text and len(text) < 200 else "it is truncated or malformed"


def decode_body(data: bytes, content_type: str | None, limits: BodyLimits | None = None) -> Any:
    """Parse a request body by its Content-Type (msgpack when none is given); with `limits`, its shape is
    bounded too (msgpack refuses an over-long list at its header, JSON once parsed)."""
    if not content_type or is_msgpack(content_type):
        try:
            body = unpackb(data, limits.length if limits else -1)
        except InvalidInput:
            raise
        except msgpack.StackError:
            raise InvalidInput("the msgpack body nests too deeply") from None
        except ValueError as e:
            if "exceeds max_" in str(e) and limits:
                raise PayloadTooLarge(
                    f"a list or map in the body is over the limit of {limits.length:,} entries (SHOAL_MAX_BODY_LIST)"
                ) from None
            raise InvalidInput(f"the body is not valid msgpack: {_msgpack_reason(e)}") from None
        except Exception as e:  # noqa: BLE001 - any decoder failure is the caller's malformed body
            raise InvalidInput(f"the body is not valid msgpack: {_msgpack_reason(e)}") from None
    elif is_json(content_type):
        body = loads_json(data)
    else:
        raise InvalidInput(f"unsupported Content-Type {content_type!r}; send application/msgpack or application/json")
    if limits is not None:
        check_shape(body, limits)
    return body


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
