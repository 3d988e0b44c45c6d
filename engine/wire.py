"""Body codecs: msgpack with numpy arrays in the msgpack-numpy convention, and JSON with plain lists."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import NamedTuple

import msgpack
import numpy as np
import numpy.typing as npt
import orjson

from engine.errors import InvalidInput, PayloadTooLarge

MSGPACK = "application/msgpack"
JSON = "application/json"
_MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")
_NUMERIC_KINDS = "biuf"

MapKey = str | int | float | bool | bytes | None  # msgpack maps may have any scalar key (JSON: strings)
# a decoded body, not yet validated: JSON's values, and msgpack's bytes and numpy arrays
Decoded = (
    None
    | bool
    | int
    | float
    | str
    | bytes
    | npt.NDArray[np.generic]
    | np.generic
    | list["Decoded"]
    | dict[MapKey, "Decoded"]
)
DecodedMap = dict[MapKey, Decoded]  # a decoded body that is a map, its fields not yet validated


def as_map(body: Decoded, message: str) -> DecodedMap:
    """The body as a map, or INVALID_INPUT with `message` (what the route wants the body to be)."""
    if not isinstance(body, dict):
        raise InvalidInput(message)
    return body


Scalar = int | float | bool | complex | str | bytes  # what a numpy scalar's item() gives


def _encode_numpy(obj: object) -> dict[bytes, object] | Scalar:
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
        item: Scalar = obj.item()
        return item
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _decode_numpy(obj: dict[MapKey, Decoded]) -> Decoded:
    if b"nd" not in obj and "nd" not in obj:
        return obj

    def get(key: str) -> Decoded:  # keys may be bytes or str
        return obj.get(key.encode(), obj.get(key))

    kind, data, shape = get("type"), get("data"), get("shape")
    if not isinstance(kind, str | bytes) or not isinstance(data, bytes) or not isinstance(shape, list | None):
        raise InvalidInput("a numpy array in the msgpack body needs 'type', 'data' and 'shape'")
    dtype = np.dtype(kind.decode() if isinstance(kind, bytes) else kind)
    if dtype.kind not in _NUMERIC_KINDS or get("kind") not in (b"", ""):
        raise InvalidInput("only numeric numpy arrays are accepted in msgpack bodies")
    if not get("nd"):
        return np.frombuffer(data, dtype=dtype, count=1)[0]
    dims = [d for d in shape or () if isinstance(d, int)]
    return np.frombuffer(data, dtype=dtype).reshape(dims)


def packb(obj: object) -> bytes:
    return msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)


def unpackb(data: bytes, max_len: int = -1) -> Decoded:
    """msgpack to Python; with `max_len`, a longer array or map fails at its header (ValueError), before
    any of its entries is built."""
    decoded: Decoded = msgpack.unpackb(  # msgpack is untyped: what it builds is a Decoded
        data,
        object_hook=_decode_numpy,
        raw=False,
        strict_map_key=False,
        max_array_len=max_len,
        max_map_len=max_len,
    )
    return decoded


class BodyLimits(NamedTuple):
    """How deep a request body may nest and how long any of its lists or maps may be."""

    depth: int
    length: int


def check_shape(obj: Decoded, limits: BodyLimits) -> None:
    """400 for nesting deeper than `limits.depth`, 413 for a list or map longer than `limits.length`; one
    pass, level by level, that checks a container's length before visiting its entries."""
    level, depth = [obj], 0
    while level:
        containers: list[Decoded] = []
        for node in level:
            if type(node) is dict:
                entries: Iterable[Decoded] = node.values()
            elif type(node) is list:
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


def _jsonable(obj: object) -> list[object] | Scalar:
    if isinstance(obj, np.ndarray):
        values: list[object] = obj.tolist()
        return values
    if isinstance(obj, np.generic):
        item: Scalar = obj.item()
        return item
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _widened(obj: object) -> object:
    """`obj` with float arrays and scalars as float64, so that orjson writes a float32 with float64 digits, as
    the standard library did (0.1f as 0.10000000149011612, not 0.1); every value reads back as the same float32,
    and almost always as the same float64 (orjson's last digit differs now and then: 0.1161649376153945 where
    the standard library wrote 0.11616493761539459, the same float32)."""
    if isinstance(obj, dict):
        return {k: _widened(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_widened(v) for v in obj]
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f" and obj.dtype != np.float64:
        return obj.astype(np.float64)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def dumps_json(obj: object) -> bytes:
    """Compact JSON. orjson writes a 384-d vector about 25x faster than the standard library, which keeps the
    event loop free under load; what orjson refuses (integers past 64 bits, keys that are not strings) is
    written by the standard library."""
    try:
        return orjson.dumps(_widened(obj), option=orjson.OPT_SERIALIZE_NUMPY)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(obj, default=_jsonable, separators=(",", ":")).encode()


def is_msgpack(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in _MSGPACK_TYPES


def is_json(content_type: str | None) -> bool:
    base = (content_type or "").split(";")[0].strip().lower()
    return base == JSON or base.endswith("+json")


def _not_json_constant(name: str) -> float:
    raise InvalidInput(f"{name} is not a JSON number; send a finite number")


def loads_json(data: bytes | str) -> Decoded:
    """JSON to Python, every failure an InvalidInput in the caller's terms: where the syntax broke, bytes that
    are not UTF-8, integers past Python's 4,300-digit limit, and NaN or Infinity (not JSON)."""
    try:
        decoded: Decoded = json.loads(data, parse_constant=_not_json_constant)  # json is untyped: JSON values
        return decoded
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


def decode_body(data: bytes, content_type: str | None, limits: BodyLimits | None = None) -> Decoded:
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


def encode_response(obj: object, media_type: str) -> bytes:
    return packb(obj) if media_type == MSGPACK else dumps_json(obj)
