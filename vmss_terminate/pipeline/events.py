"""The Scheduled Events document as the agent sees it, and the one ownership rule.

Parsing is tolerant on purpose: IMDS adds fields over api-versions (`scheduled_events.EVENT_FIELD_SINCE`)
and may add event types, so unknown keys are
kept in `raw` and unknown types are observed like any other. What is *not* tolerated is a document
without an `Events` list: that is a malformed answer and the client retries it.

Ownership: an event is ours when our VM name is one of its `Resources`, compared as whole names
the way Azure compares resource names: case-insensitive for ASCII letters only. Azure VM names are
ASCII, so a spelling with any non-ASCII character (`webvmſs_1`, `webvmß_1`) is another name, never
ours; Unicode case folding would make it ours. Never a substring or prefix: `vmss_1` is not
`vmss_10`. A name with U+FFFD (an undecodable byte of the answer) is never ours either: two different bad bytes
read the same. Every other case-insensitive comparison of IMDS data (event types, statuses, EventIds)
uses the same rule (`same_name`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from vmss_terminate.errors import UsageError
from vmss_terminate.scheduled_events import EVENT_TYPES, SCHEDULED, STARTED, STATUSES

__all__ = [
    "EVENT_TYPES", "EVERY_LISTED_VM", "SCHEDULED", "STARTED", "MalformedDocument", "parse_not_before", "canonical_type",
    "canonical_status", "parse_duration", "same_name", "Event", "owns", "EventsDocument", "parse_types",
    "UNREADABLE",
]


UNREADABLE = "\ufffd"  # what an undecodable byte of an answer reads as (imds._json_text): never a name of ours


EVERY_LISTED_VM = "*"
"""The VM a source acts for when it acts for every VM an event lists (a central handler): no VM
name can be it (`scheduled_events.vm_name_problem` refuses `*`). The policy then treats every
listed VM as its own; hooks get an empty VMSS_TERMINATE_VM_NAME and the list in RESOURCES."""


class MalformedDocument(ValueError):
    """The answer is not a Scheduled Events document (not JSON object / no Events list)."""


def parse_not_before(value: Any) -> Optional[float]:
    """Epoch seconds from RFC 1123 (`Mon, 19 Sep 2016 18:29:47 GMT`); None for "" (Started) or unreadable.

    ISO 8601 is accepted too because Microsoft's own mock server writes it.
    """
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        parsed = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except (ValueError, OverflowError):
            return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    try:
        return parsed.timestamp()
    except (ValueError, OverflowError):
        return None


def parse_duration(value: Any) -> Optional[int]:
    """DurationInSeconds as an int; None when absent or unreadable (non-finite, huge, not a number):
    it is informational, and an odd value must never make the event -- or the document -- unreadable."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def canonical_type(value: str) -> str:
    """`terminate` -> `Terminate`; unknown types are returned unchanged."""
    for known in EVENT_TYPES:
        if same_name(known, str(value)):
            return known
    return str(value)


def canonical_status(value: Any) -> str:
    """`scheduled` -> `Scheduled`, `STARTED` -> `Started`; other statuses are returned unchanged."""
    text = str(value or "")
    for known in STATUSES:
        if same_name(known, text):
            return known
    return text


def _resource_names(value: Any) -> Tuple[str, ...]:
    """Resources as names. An entry that is not a string is kept as its JSON text: it is not this
    VM, and dropping it would make a shared event look like ours alone (and approvable)."""
    if not isinstance(value, list):
        return ()
    return tuple(r if isinstance(r, str) else json.dumps(r, sort_keys=True, default=str) for r in value)


def same_name(a: str, b: str) -> bool:
    """Whole-name comparison as Azure does it: equal, or equal ignoring the case of ASCII letters.

    Both must be ASCII for the case-insensitive part: `str.lower`/`casefold` map characters such as
    `ſ` (long s), `K` (Kelvin sign) or `ß` onto ASCII letters, and that would make another name ours.
    """
    if a == b:
        return True
    return a.isascii() and b.isascii() and a.lower() == b.lower()


@dataclass(frozen=True)
class Event:
    """One scheduled event. `raw` is the event's JSON exactly as IMDS sent it (unknown fields kept).
    A source other than IMDS builds it the same way (`from_json` of the IMDS-shaped fields), adding
    `resource_ids` when it knows them (`dataclasses.replace(event, resource_ids=...)`)."""

    event_id: str
    event_type: str
    resource_type: str
    resources: Tuple[str, ...]
    status: str
    not_before_raw: str
    not_before: Optional[float]
    description: Optional[str] = None
    event_source: Optional[str] = None
    duration_in_seconds: Optional[int] = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: VM name -> full resource id, from a source that knows them (a central handler's); IMDS gives none
    resource_ids: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Event":
        if not isinstance(data, Mapping) or not isinstance(data.get("EventId"), str) or not data["EventId"]:
            raise MalformedDocument(f"event without an EventId: {data!r}"[:200])
        if UNREADABLE in data["EventId"]:  # a byte IMDS sent was not UTF-8: not an id we could post back
            raise MalformedDocument(f"EventId with an undecodable byte: {data['EventId']!r}"[:200])
        raw = data.get("NotBefore")
        not_before_raw = raw if isinstance(raw, str) else ""
        return cls(
            event_id=data["EventId"],
            event_type=canonical_type(str(data.get("EventType") or "")),
            resource_type=str(data.get("ResourceType") or ""),
            resources=_resource_names(data.get("Resources")),
            status=canonical_status(data.get("EventStatus")),
            not_before_raw=not_before_raw,
            not_before=parse_not_before(not_before_raw),
            description=data.get("Description"),
            event_source=data.get("EventSource"),
            duration_in_seconds=parse_duration(data.get("DurationInSeconds")),
            raw=dict(data),
        )

    def names(self, vm_name: str) -> bool:
        """True if `vm_name` is one of Resources (whole element, ASCII case-insensitive; never a prefix)."""
        return owns(self.resources, vm_name)

    def others(self, vm_name: str) -> List[str]:
        """Resources that are not `vm_name`: non-empty means approving releases other VMs too."""
        return [r for r in self.resources if not same_name(r, vm_name)]

    @property
    def scheduled(self) -> bool:
        return self.status == SCHEDULED

    @property
    def started(self) -> bool:
        return self.status == STARTED

    def to_json(self) -> Dict[str, Any]:
        """The event as the source sent it (a hook's stdin), with `ResourceIds` (VM name -> resource
        id) when the source knew them."""
        return {**self.raw, "ResourceIds": dict(self.resource_ids)} if self.resource_ids else dict(self.raw)


def owns(resources: Iterable[str], vm_name: str) -> bool:
    """The ownership rule used everywhere, including the guard right before an approval POST."""
    if not vm_name or UNREADABLE in vm_name:
        return False
    return any(isinstance(r, str) and UNREADABLE not in r and same_name(r, vm_name) for r in resources)


@dataclass(frozen=True)
class EventsDocument:
    """`{"DocumentIncarnation": n, "Events": [...]}`."""

    incarnation: Any
    events: Tuple[Event, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    skipped: int = 0  # unreadable entries (no EventId, or a field no parse survives), ignored
    unreadable: Tuple[str, ...] = ()  # why each skipped entry was skipped, for the log

    @classmethod
    def from_json(cls, data: Any) -> "EventsDocument":
        if not isinstance(data, Mapping) or not isinstance(data.get("Events"), list):
            raise MalformedDocument("not a Scheduled Events document (no Events list)")
        events, unreadable = [], []
        for index, item in enumerate(data["Events"]):
            # One unreadable entry must never hide the others (e.g. our Terminate): whatever a parse
            # of one entry raises makes that entry unreadable, not the document.
            try:
                events.append(Event.from_json(item))
            except Exception as exc:  # any field of any (foreign) entry may be odd
                unreadable.append(f"entry {index}: {exc.__class__.__name__}: {str(exc)[:120]}")
        return cls(incarnation=data.get("DocumentIncarnation"), events=tuple(events), raw=dict(data),
                   skipped=len(unreadable), unreadable=tuple(unreadable))

    def get(self, event_id: str) -> Optional[Event]:
        """The event with this EventId (GUIDs compare case-insensitively), or None."""
        for event in self.events:
            if event.event_id == event_id:
                return event
        return next((e for e in self.events if same_name(e.event_id, event_id)), None)

    def all_with_id(self, event_id: str) -> List[Event]:
        """Every entry with this EventId (case-insensitive): a document may repeat one."""
        return [e for e in self.events if same_name(e.event_id, event_id)]

    def ours(self, vm_name: str) -> List[Event]:
        return [e for e in self.events if e.names(vm_name)]


def parse_types(value: Any, what: str = "event types") -> Tuple[str, ...]:
    """`"Terminate,Reboot"` -> ("Terminate", "Reboot"); "none" -> (); UsageError for unknown names."""
    if value is None:
        return ()
    if isinstance(value, str) and not value.strip():
        raise UsageError(f"empty {what}: name event types ({', '.join(EVENT_TYPES)}), all or none")
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(i).strip() for i in items if str(i).strip()]
    if len(names) == 1 and same_name(names[0], "none"):
        return ()
    if any(same_name(n, "all") or n == "*" for n in names):
        return EVENT_TYPES
    out = []
    for name in names:
        canon = canonical_type(name)
        if canon not in EVENT_TYPES:
            raise UsageError(f"unknown event type {name!r} in {what}: use {', '.join(EVENT_TYPES)}, all or none")
        if canon not in out:
            out.append(canon)
    return tuple(out)
