"""Fault injection for the emulators: what to break, for which requests, how many times.

Tests add `Fault`s from Python (`server.faults.add(status=429, ...)`); users testing their hooks add
the same faults from the command line (`vmss-terminate emulator imds|arm --fault SPEC`) or, while an
emulator runs, through its admin route (`POST /emulator/faults` with the same fields as JSON). One
parser serves both, so a fault means the same thing everywhere.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from vmss_terminate.params import shown, strict_decimal, strict_whole

# Answer faults: the app answers, but what it says is wrong in a way a client must survive. Only
# the ARM emulator acts on them (they name ARM's links, operations and Resource Graph pages).
ANSWER_FIELDS = ("foreign-link", "link-loop", "stuck", "short-rows", "duplicate-rows", "repeat-skiptoken")
FAULT_FIELDS = ("status", "times", "delay", "garbage", "drip", "pad", "reset", "method", "path",
                "retry-after") + ANSWER_FIELDS
FAULT_SPEC_HELP = (
    "comma list of status=CODE, delay=SECONDS, garbage (200 with a non-JSON body), drip=SECONDS (send the "
    "answer one byte per SECONDS), pad=BYTES (pad the JSON answer with whitespace to BYTES), reset (reset "
    "the connection instead of answering), retry-after=SECONDS, method=GET|POST|..., path=SUBSTRING, "
    "times=N|all (default 1); ARM only: foreign-link=ORIGIN (nextLink, Azure-AsyncOperation and Location "
    "point at ORIGIN), link-loop (nextLink points at the request itself), stuck (an operation stays "
    "InProgress), short-rows=N (a Resource Graph page keeps N rows, drops $skipToken, keeps totalRecords), "
    "duplicate-rows=N (N rows of the page again, ids in upper case), repeat-skiptoken (the next-page "
    "$skipToken is the one the request sent); e.g. status=429,retry-after=2,times=3"
)
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
    repeat_skip_token: bool = False

    @property
    def edits_answer(self) -> bool:
        """An answer fault: the app must answer (and falsify its answer) rather than be skipped."""
        return bool(self.foreign_link or self.link_loop or self.stuck or self.short_rows is not None
                    or self.duplicate_rows or self.repeat_skip_token)

    def matches(self, request: Any) -> bool:
        if self.method and self.method.upper() != request.method:
            return False
        return not (self.path_contains and self.path_contains not in request.path)


def answer_fault_names(fault: Fault) -> List[str]:
    """The answer-fault fields a fault sets, by their `--fault` names."""
    return [name for name, on in (("foreign-link", fault.foreign_link), ("link-loop", fault.link_loop),
                                  ("stuck", fault.stuck), ("short-rows", fault.short_rows is not None),
                                  ("duplicate-rows", fault.duplicate_rows),
                                  ("repeat-skiptoken", fault.repeat_skip_token)) if on]


def refuse_answer_fault(fault: Fault) -> None:
    """FaultSpecError for an answer fault given to an emulator that would silently ignore it."""
    if fault.edits_answer:
        raise FaultSpecError(f"only the ARM emulator acts on answer faults ({', '.join(answer_fault_names(fault))}); "
                             "use status, delay, garbage, drip, pad or reset here")


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
    status = _number(fields, "status", int, 100, 599)
    delay = _number(fields, "delay", float, 0.0, 3600.0) or 0.0
    garbage = _flag(fields.get("garbage", False))
    drip = _number(fields, "drip", float, 0.0, 60.0) or 0.0
    pad = _number(fields, "pad", int, 0, 1 << 30) or 0
    reset = _flag(fields.get("reset", False))
    answer = _answer_fields(fields)
    if status is None and not delay and not garbage and not drip and not pad and not reset and not answer:
        raise FaultSpecError("a fault needs status, delay, garbage, drip, pad, reset or an answer fault ("
                             + ", ".join(ANSWER_FIELDS) + ")")
    headers: Dict[str, str] = {}
    retry_after = _number(fields, "retry-after", int, 0, 86400)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    times: Optional[int] = 1  # the default: the next matching request only
    if str(fields.get("times", "")).strip().lower() in ("all", "*"):
        times = None  # every matching request until cleared
    elif "times" in fields:
        times = _number(fields, "times", int, 1, 10**9)
    method = fields.get("method")
    path = fields.get("path")
    return Fault(status=status, headers=headers, delay=delay, garbage=garbage, drip=drip, pad=pad, reset=reset,
                 method=str(method).upper() if method else None, path_contains=str(path) if path else None,
                 times=times, **answer)


def _answer_fields(fields: Mapping[str, Any]) -> Dict[str, Any]:
    """The answer-fault fields given, as Fault keyword arguments."""
    out: Dict[str, Any] = {}
    origin = fields.get("foreign-link")
    if origin is not None:
        if origin is True or not _ORIGIN.match(str(origin).strip()):
            raise FaultSpecError(f"invalid fault foreign-link {origin!r}: expected an origin like "
                                 "http://127.0.0.2:8080")
        out["foreign_link"] = str(origin).strip().rstrip("/")
    for name, key in (("link-loop", "link_loop"), ("stuck", "stuck"), ("repeat-skiptoken", "repeat_skip_token")):
        if _flag(fields.get(name, False)):
            out[key] = True
    short = _number(fields, "short-rows", int, 0, 1000)
    if short is not None:
        out["short_rows"] = short
    duplicates = _number(fields, "duplicate-rows", int, 1, 1000)
    if duplicates:
        out["duplicate_rows"] = duplicates
    return out


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
    return {"status": fault.status, "delay": fault.delay, "garbage": fault.garbage, "drip": fault.drip,
            "pad": fault.pad, "reset": fault.reset, "method": fault.method,
            "path": fault.path_contains, "retry-after": fault.headers.get("Retry-After"),
            "times": "all" if fault.times is None else fault.times,
            "foreign-link": fault.foreign_link, "link-loop": fault.link_loop, "stuck": fault.stuck,
            "short-rows": fault.short_rows, "duplicate-rows": fault.duplicate_rows,
            "repeat-skiptoken": fault.repeat_skip_token}


def _number(fields: Mapping[str, Any], name: str, kind: type, low: float, high: float) -> Any:
    value = fields.get(name)
    if value is None or value is True:
        if value is True:
            raise FaultSpecError(f"fault field {name} needs a value")
        return None
    number = strict_whole(value) if kind is int else strict_decimal(value)  # ASCII digits, bounded
    if number is None:
        raise FaultSpecError(f"invalid fault {name} {shown(value)}: expected a number")
    if not low <= number <= high:
        raise FaultSpecError(f"invalid fault {name} {value!r}: expected {low}..{high}")
    return number


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no", ""):
        return False
    raise FaultSpecError(f"invalid fault flag {value!r}: expected true or false")
