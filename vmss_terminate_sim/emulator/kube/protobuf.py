"""The one protobuf body the emulator reads: DeleteOptions, which kubectl's typed clients send on
DELETE (`kubectl drain --disable-eviction`). Everything else is JSON (other protobuf bodies are 415).

Kubernetes wraps a protobuf object in a 4-byte magic `k8s\\0` and a `runtime.Unknown` message
(1 typeMeta, 2 raw, 3 contentEncoding, 4 contentType); `raw` is the DeleteOptions message
(1 gracePeriodSeconds int64, 2 preconditions {1 uid, 2 resourceVersion}, 3 orphanDependents,
4 propagationPolicy, 5 dryRun repeated string).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple, Union

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Field = Tuple[int, Union[int, bytes]]


class ProtobufError(ValueError):
    """Not a DeleteOptions in Kubernetes' protobuf envelope."""


def _varint(data: bytes, at: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[Field]:
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ProtobufError("truncated field")
            yield number, data[at:at + size]
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _text(value: Union[int, bytes]) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a string")
    return value.decode("utf-8")


def delete_options(body: bytes) -> Dict[str, Any]:
    """The DeleteOptions in `body` as its JSON form (only the fields that are set)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("no k8s protobuf magic")
    raw = b""
    for number, value in _fields(body[len(MAGIC):]):
        if number == 2 and isinstance(value, bytes):
            raw = value
    options: Dict[str, Any] = {}
    for number, value in _fields(raw):
        if number == 1 and isinstance(value, int):
            options["gracePeriodSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 2 and isinstance(value, bytes):
            names = {1: "uid", 2: "resourceVersion"}
            options["preconditions"] = {names[n]: _text(v) for n, v in _fields(value) if n in names}
        elif number == 3 and isinstance(value, int):
            options["orphanDependents"] = bool(value)
        elif number == 4:
            options["propagationPolicy"] = _text(value)
        elif number == 5:
            options.setdefault("dryRun", []).append(_text(value))
    return options
