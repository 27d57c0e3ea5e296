"""Fault injection for the emulators: what to break, for which requests, how many times.

Tests add `Fault`s from Python (`server.faults.add(status=429, ...)`); users testing their hooks add
the same faults from the command line (`vmss-terminate emulator imds|arm --fault SPEC`) or, while an
emulator runs, through its admin route (`POST /emulator/faults` with the same fields as JSON). One
parser serves both, so a fault means the same thing everywhere.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from vmss_terminate.params import shown, strict_decimal, strict_whole

ARM = "arm"
"""`FaultField.only` of an answer fault: the app answers, but what it says is wrong in a way a
client must survive. Only the ARM emulator acts on them (they name ARM's links, operations and
Resource Graph pages)."""


@dataclass(frozen=True)
class FaultField:
    """One field of a fault, as `--fault`, the admin route and `Fault` know it: its name in a spec
    (`retry-after`), the `Fault` attribute it fills (its default is the attribute's), how its value
    is read (`kind`: int, float, flag, text, origin or times) within `low`..`high`, its help in
    `--fault`'s, whether it breaks something on its own (a fault needs one such field), and which
    emulator acts on it (`only`: None for every emulator, or `ARM`)."""

    name: str
    attr: str
    kind: str
    help: str
    low: float = 0
    high: float = 0
    breaks: bool = False
    only: Optional[str] = None


FAULT_REGISTRY: Tuple[FaultField, ...] = (
    FaultField("status", "status", "int", "status=CODE", 100, 599, breaks=True),
    FaultField("delay", "delay", "float", "delay=SECONDS", 0.0, 3600.0, breaks=True),
    FaultField("garbage", "garbage", "flag", "garbage (200 with a non-JSON body)", breaks=True),
    FaultField("drip", "drip", "float", "drip=SECONDS (send the answer one byte per SECONDS)", 0.0, 60.0,
               breaks=True),
    FaultField("pad", "pad", "int", "pad=BYTES (pad the JSON answer with whitespace to BYTES)", 0, 1 << 30,
               breaks=True),
    FaultField("reset", "reset", "flag", "reset (reset the connection instead of answering)", breaks=True),
    FaultField("retry-after", "headers", "int", "retry-after=SECONDS", 0, 86400),  # the Retry-After header
    FaultField("method", "method", "text", "method=GET|POST|..."),
    FaultField("path", "path_contains", "text", "path=SUBSTRING"),
    FaultField("times", "times", "times", "times=N|all (default 1)", 1, 10**9),
    FaultField("foreign-link", "foreign_link", "origin",
               "foreign-link=ORIGIN (nextLink, Azure-AsyncOperation and Location point at ORIGIN)",
               breaks=True, only=ARM),
    FaultField("link-loop", "link_loop", "flag", "link-loop (nextLink points at the request itself)",
               breaks=True, only=ARM),
    FaultField("stuck", "stuck", "flag", "stuck (an operation stays InProgress)", breaks=True, only=ARM),
    FaultField("short-rows", "short_rows", "int",
               "short-rows=N (a Resource Graph page keeps N rows, drops $skipToken, keeps totalRecords)", 0, 1000,
               breaks=True, only=ARM),
    FaultField("duplicate-rows", "duplicate_rows", "int",
               "duplicate-rows=N (N rows of the page again, ids in upper case, counted in totalRecords)", 1, 1000,
               breaks=True, only=ARM),
    FaultField("stale-rows", "stale_rows", "int",
               "stale-rows=N (N rows of the page answered twice, the first copy stale: terminate notification off)",
               1, 1000, breaks=True, only=ARM),
    FaultField("repeat-skiptoken", "repeat_skip_token", "flag",
               "repeat-skiptoken (the next-page $skipToken is the one the request sent)", breaks=True, only=ARM),
)
"""Every fault field, once: the parser, the admin route's listing, `--fault`'s help and the
answer-fault checks all read this table."""

FAULT_FIELDS = tuple(f.name for f in FAULT_REGISTRY)
ANSWER_FIELDS = tuple(f.name for f in FAULT_REGISTRY if f.only == ARM)
_BREAKING = tuple(f.name for f in FAULT_REGISTRY if f.breaks and f.only is None)
FAULT_SPEC_HELP = ("comma list of " + ", ".join(f.help for f in FAULT_REGISTRY if f.only is None)
                   + "; ARM only: " + ", ".join(f.help for f in FAULT_REGISTRY if f.only == ARM)
                   + "; e.g. status=429,retry-after=2,times=3")
_ORIGIN = re.compile(r"^https?://[^/?#\s]+$", re.IGNORECASE)


class FaultSpecError(ValueError):
    """A fault description that cannot be used (a bad value, an unknown field, nothing to break)."""


@dataclass
class Fault:
    """One injected misbehaviour. Matches by method and path substring (None matches anything).

    `delay` seconds are waited before answering; then `status`/`body`/`headers` replace the app's
    answer when `status` is set (the app is not called), otherwise the app answers after the delay.
    `garbage=True` answers 200 with a body that is not JSON. The app's own answer can also be
    delivered badly: `drip` seconds between its bytes (a slow-drip body that never trips a per-read
    timeout), `pad` bytes of trailing whitespace (a valid but huge document), or `reset` (the
    connection is reset, RST, instead of answering).
    """

    status: Optional[int] = None
    body: Optional[bytes] = None
    headers: Dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    garbage: bool = False
    drip: float = 0.0
    pad: int = 0
    reset: bool = False
    method: Optional[str] = None
    path_contains: Optional[str] = None
    times: Optional[int] = 1  # None: every matching request, until `FaultInjector.clear()`
    # answer faults (ARM): the app's answer, falsified
    foreign_link: Optional[str] = None  # an origin: links in the answer point there instead
    link_loop: bool = False
    stuck: bool = False
    short_rows: Optional[int] = None
    duplicate_rows: int = 0
    stale_rows: int = 0
    repeat_skip_token: bool = False

    @property
    def edits_answer(self) -> bool:
        """An answer fault: the app must answer (and falsify its answer) rather than be skipped."""
        return bool(answer_fault_names(self))

    def matches(self, request: Any) -> bool:
        if self.method and self.method.upper() != request.method:
            return False
        return not (self.path_contains and self.path_contains not in request.path)


def answer_fault_names(fault: Fault) -> List[str]:
    """The answer-fault fields a fault sets, by their `--fault` names."""
    return [f.name for f in FAULT_REGISTRY if f.only == ARM and _is_set(fault, f)]


def _is_set(fault: Fault, spec: FaultField) -> bool:
    """Whether `fault` sets this field: its attribute differs from the dataclass default."""
    return bool(getattr(fault, spec.attr) != _DEFAULTS[spec.attr])


def refuse_answer_fault(fault: Fault) -> None:
    """FaultSpecError for an answer fault given to an emulator that would silently ignore it."""
    if fault.edits_answer:
        raise FaultSpecError(f"only the ARM emulator acts on answer faults ({', '.join(answer_fault_names(fault))}); "
                             f"use {', '.join(_BREAKING[:-1])} or {_BREAKING[-1]} here")


class FaultInjector:
    """A thread-safe queue of faults; each matching request consumes one use of the first match.

    `answer_faults`: whether the app behind it acts on answer faults (the ARM emulator); elsewhere
    `add()` refuses them instead of queueing a fault that would do nothing."""

    def __init__(self, answer_faults: bool = False) -> None:
        self.answer_faults = answer_faults
        self._faults: List[Fault] = []
        self._lock = threading.Lock()
        self._cleared = threading.Event()  # set (and replaced) by clear(): cuts injected delays short

    def add(self, fault: Optional[Fault] = None, **kwargs: Any) -> Fault:
        fault = fault or Fault(**kwargs)
        if not self.answer_faults:
            refuse_answer_fault(fault)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Drop every queued fault and end the injected delays still running, so that a slow
        request does not outlive the scenario that asked for it."""
        with self._lock:
            self._faults.clear()
            self._cleared.set()
            self._cleared = threading.Event()

    def delay(self, seconds: float) -> bool:
        """Wait out an injected delay (an injected slow answer, not synchronisation); `clear()` ends it
        (then True)."""
        with self._lock:
            cleared = self._cleared
        return cleared.wait(seconds)

    def take(self, request: Any) -> Optional[Fault]:
        with self._lock:
            for fault in self._faults:
                if fault.matches(request):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def queued(self) -> List[Fault]:
        with self._lock:
            return list(self._faults)

    def pending(self) -> Optional[int]:
        """Uses left; None while an unlimited fault is queued."""
        with self._lock:
            if any(f.times is None for f in self._faults):
                return None
            return sum(f.times or 0 for f in self._faults)


def fault_from_fields(fields: Mapping[str, Any]) -> Fault:
    """A Fault from the documented fields (the admin route's JSON, or a parsed `--fault` spec)."""
    if not isinstance(fields, Mapping):
        raise FaultSpecError("a fault is an object of fields: " + ", ".join(FAULT_FIELDS))
    unknown = sorted(set(fields) - set(FAULT_FIELDS))
    if unknown:
        raise FaultSpecError(f"unknown fault field(s) {', '.join(unknown)}: use {', '.join(FAULT_FIELDS)}")
    values = {spec.attr: _read(spec, fields[spec.name]) for spec in FAULT_REGISTRY if spec.name in fields}
    retry_after = values.pop("headers", None)
    fault = Fault(headers={} if retry_after is None else {"Retry-After": str(retry_after)}, **values)
    if not any(_is_set(fault, spec) for spec in FAULT_REGISTRY if spec.breaks):
        raise FaultSpecError(f"a fault needs {', '.join(_BREAKING)} or an answer fault ({', '.join(ANSWER_FIELDS)})")
    return fault


def _read(spec: FaultField, value: Any) -> Any:
    """One field's value as its `Fault` attribute holds it (its default for "not given", JSON null)."""
    if spec.kind == "flag":
        return _flag(value)
    if value is None:
        return None if spec.kind == "times" else _DEFAULTS[spec.attr]  # times null: every request, as before
    if spec.kind == "text":
        return (str(value).upper() if spec.name == "method" else str(value)) if value else None
    if spec.kind == "origin":
        if value is True or not _ORIGIN.match(str(value).strip()):
            raise FaultSpecError(f"invalid fault {spec.name} {value!r}: expected an origin like "
                                 "http://127.0.0.2:8080")
        return str(value).strip().rstrip("/")
    if spec.kind == "times" and str(value).strip().lower() in ("all", "*"):
        return None  # every matching request until cleared
    number = _number(spec, value)
    return _DEFAULTS[spec.attr] if number is None else number


def parse_fault_spec(text: str) -> Fault:
    """`status=503,times=2,path=/metadata/scheduledevents` -> Fault; a bare name is a flag (`garbage`)."""
    fields: Dict[str, Any] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        key, has_value, value = part.partition("=")
        fields[key.strip().lower()] = value.strip() if has_value else True
    return fault_from_fields(fields)


def fault_json(fault: Fault) -> Dict[str, Any]:
    """A queued fault as the admin route lists it (the same field names it accepts)."""
    shown_as = {"headers": fault.headers.get("Retry-After"), "times": "all" if fault.times is None else fault.times}
    return {spec.name: shown_as.get(spec.attr, getattr(fault, spec.attr)) for spec in FAULT_REGISTRY}


def _number(spec: FaultField, value: Any) -> Any:
    if value is None or value is True:
        if value is True:
            raise FaultSpecError(f"fault field {spec.name} needs a value")
        return None
    number = strict_whole(value) if spec.kind != "float" else strict_decimal(value)  # ASCII digits, bounded
    if number is None:
        raise FaultSpecError(f"invalid fault {spec.name} {shown(value)}: expected a number")
    if not spec.low <= number <= spec.high:
        raise FaultSpecError(f"invalid fault {spec.name} {value!r}: expected {spec.low}..{spec.high}")
    return number


_DEFAULTS: Dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Fault)
                             if f.default is not dataclasses.MISSING}
_DEFAULTS["headers"] = None  # retry-after: not given


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no", ""):
        return False
    raise FaultSpecError(f"invalid fault flag {value!r}: expected true or false")
