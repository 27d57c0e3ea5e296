"""The shared scheduled-event list of a placement group, and its life cycle.

Azure delivers every scheduled event of a scale-set placement group to *every* VM in it; the
`Resources` field says which VMs are affected. `PlacementGroup` is that shared list: several
`ImdsEmulator` apps (one per VM) read and approve the same events, so tests can show an agent
ignoring its neighbour's event. Approvals are recorded with the approving VM's name, because
approving someone else's event is the worst bug the agent can have.

Life cycle (per the Scheduled Events doc): an event is `Scheduled` with a `NotBefore` time; it
turns `Started` (NotBefore `""`) when approved or when NotBefore passes, and is removed some time
later (`started_ttl`, on the injected clock). Every change increments `DocumentIncarnation`.
Time-based transitions happen in `tick()`, which the IMDS app calls on every request and
`wait_for` calls while waiting, so nothing needs a background thread.
"""

from __future__ import annotations

import collections
import copy
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import UsageError
from vmss_terminate.params import strict_decimal
from vmss_terminate.scheduled_events import (  # re-exported: the emulator's public names
    EVENT_SOURCES,
    EVENT_TYPES,
    MINIMUM_NOTICE,
    NOT_BEFORE_EXAMPLE,
    SCHEDULED,
    STARTED,
    format_not_before,
)

log = logging.getLogger(__name__)


Listener = Callable[[str, "EmulatedEvent"], None]
TimeLike = Union[float, int, datetime, str, None]


#: NotBefore must be writable as RFC 1123 (years 1970..9999): a time out of range would make every
#: later read of the placement group fail (500) instead of refusing the bad input once.
LATEST_NOT_BEFORE = 253402300799.0  # Fri, 31 Dec 9999 23:59:59 GMT
#: The largest |NotBeforeIn| accepted: a year is far beyond any real notice (PT15M at most).
MAX_NOT_BEFORE_IN = 366 * 86400.0


def parse_time(value: TimeLike) -> Optional[float]:
    """Epoch seconds from a number, an aware datetime or an RFC 1123 string (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = strict_decimal(value)
        if number is None or not 0 <= number <= LATEST_NOT_BEFORE:
            raise UsageError(f"invalid NotBefore {value!r}: epoch seconds must be between 0 and {LATEST_NOT_BEFORE:.0f}")
        return number
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError, IndexError):
            pass
    raise UsageError(f"invalid NotBefore {value!r}: use epoch seconds or RFC 1123 ({NOT_BEFORE_EXAMPLE})")


@dataclass
class EmulatedEvent:
    """One scheduled event as the emulator holds it (times in epoch seconds of the group's clock)."""

    event_id: str
    event_type: str
    resources: List[str]
    not_before: float
    status: str = SCHEDULED
    description: str = ""
    event_source: str = "Platform"
    duration_in_seconds: int = -1
    resource_type: str = "VirtualMachine"
    started_at: Optional[float] = None
    created_at: float = 0.0

    def to_imds(self) -> Dict[str, Any]:
        """The newest (2020-07-01) wire shape; `imds_versions.shape_event` trims it for older versions."""
        return {
            "EventId": self.event_id,
            "EventType": self.event_type,
            "ResourceType": self.resource_type,
            "Resources": list(self.resources),
            "EventStatus": self.status,
            "NotBefore": "" if self.status == STARTED else format_not_before(self.not_before),
            "Description": self.description,
            "EventSource": self.event_source,
            "DurationInSeconds": self.duration_in_seconds,
        }


@dataclass(frozen=True)
class Approval:
    """One approval POST for one EventId.

    `accepted` is False when the EventId was unknown (the POST got a 400); `foreign` is True when
    the approving VM is not in the event's Resources -- an agent must never produce one.
    """

    event_id: str
    vm_name: str
    at: float
    accepted: bool = True
    foreign: bool = False
    via: str = "imds"  # "arm": the Maintenance RP's acknowledge (by the ARM emulator), never foreign


_FIELDS = {
    "event_type", "resources", "not_before", "status", "description", "event_source",
    "duration_in_seconds", "resource_type",
}


def _validate(fields: Mapping[str, Any]) -> Dict[str, Any]:
    """Check and normalise event fields; UsageError (exit 2) on bad input."""
    unknown = set(fields) - _FIELDS
    if unknown:
        raise UsageError(f"unknown event field(s): {', '.join(sorted(unknown))}")
    out = dict(fields)
    if "event_type" in out and out["event_type"] not in EVENT_TYPES:
        raise UsageError(f"invalid event type {out['event_type']!r}: use one of {', '.join(EVENT_TYPES)}")
    if "resources" in out:
        resources = out["resources"]
        if isinstance(resources, str) or not resources or not all(isinstance(r, str) and r for r in resources):
            raise UsageError("an event needs Resources: a non-empty list of VM names")
        out["resources"] = list(resources)
    if "status" in out and out["status"] not in (SCHEDULED, STARTED):
        raise UsageError(f"invalid event status {out['status']!r}: use Scheduled or Started")
    if "event_source" in out and out["event_source"] not in EVENT_SOURCES:
        raise UsageError(f"invalid event source {out['event_source']!r}: use Platform or User")
    for text in ("description", "resource_type"):
        if text in out and not isinstance(out[text], str):
            raise UsageError(f"{text} must be a string, not {out[text]!r}")
    if "duration_in_seconds" in out:
        try:
            out["duration_in_seconds"] = int(out["duration_in_seconds"])
        except (TypeError, ValueError):
            raise UsageError(f"invalid DurationInSeconds {out['duration_in_seconds']!r}") from None
    if "not_before" in out:
        out["not_before"] = parse_time(out["not_before"])
    return out


class PlacementGroup:
    """The events every VM of one placement group sees, with one lock for all state.

    `auto_start=False`: approval only records and NotBefore passing does nothing; the owner (e.g. the
    sandbox) calls `start_event`. Listeners run outside the lock, each change once, in order; when
    several threads change the group at once, one of them delivers for all (see `_deliver`).
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, started_ttl: float = 60.0, auto_start: bool = True,
                 group_id: Optional[str] = None) -> None:
        self.clock = clock
        self.started_ttl = float(started_ttl)
        self.auto_start = auto_start
        self.id = group_id or str(uuid.uuid4())
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._events: Dict[str, EmulatedEvent] = {}
        self._approvals: List[Approval] = []
        self._incarnation = 1
        self._version = 0  # bumps on any change incl. approvals, for wait_for
        self._listeners: List[Listener] = []
        self._undelivered: Deque[Tuple[str, EmulatedEvent]] = collections.deque()
        self._delivering = threading.RLock()  # re-entrant: a listener may change the group

    # -- reading --------------------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        with self._lock:
            return self._incarnation

    @property
    def approvals(self) -> List[Approval]:
        """Every approval attempt, oldest first (including rejected ones, `accepted=False`)."""
        with self._lock:
            return list(self._approvals)

    def events(self) -> List[EmulatedEvent]:
        """A snapshot (copies) of the current events, oldest first."""
        with self._lock:
            return [copy.deepcopy(e) for e in self._events.values()]

    def snapshot(self) -> Tuple[int, List[EmulatedEvent]]:
        """Incarnation and events read under one lock, so they always agree."""
        with self._lock:
            return self._incarnation, [copy.deepcopy(e) for e in self._events.values()]

    def get(self, event_id: str) -> Optional[EmulatedEvent]:
        with self._lock:
            event = self._find(event_id)
            return copy.deepcopy(event) if event else None

    def approvals_by(self, vm_name: str) -> List[Approval]:
        return [a for a in self.approvals if a.vm_name == vm_name]

    def foreign_approvals(self) -> List[Approval]:
        """Approvals of events that did not list the approving VM: should always be empty."""
        return [a for a in self.approvals if a.foreign]

    # -- changing -------------------------------------------------------------------------

    def add_listener(self, fn: Listener) -> None:
        """`fn(kind, event)` with kind "added" | "approved" | "started" | "removed" | "changed"."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def add_event(
        self,
        event_type: str,
        resources: Sequence[str],
        not_before: TimeLike = None,
        event_id: Optional[str] = None,
        description: str = "",
        event_source: str = "Platform",
        duration_in_seconds: int = -1,
        status: str = SCHEDULED,
    ) -> str:
        """Schedule an event; `not_before=None` means now + the type's minimum notice. Returns its EventId.

        `status="Started"` models a hardware failure, which skips the Scheduled state.
        """
        fields = _validate(dict(event_type=event_type, resources=resources, not_before=not_before,
                                description=description, event_source=event_source,
                                duration_in_seconds=duration_in_seconds, status=status))
        with self._lock:
            now = self.clock.now()
            eid = event_id or str(uuid.uuid4()).upper()
            if self._find(eid) is not None:
                raise UsageError(f"event {eid} already exists")
            if fields["not_before"] is None:
                fields["not_before"] = now + MINIMUM_NOTICE[event_type]
            event = EmulatedEvent(event_id=eid, created_at=now, **fields)
            if event.status == STARTED:
                event.started_at = now
            self._events[eid] = event
            changes = [("added", copy.deepcopy(event))]
            self._bump(changes)
        self._deliver()
        return eid

    def update_event(self, event_id: str, **fields: Any) -> None:
        """Change fields (event_type, resources, not_before, status, description, ...); KeyError if unknown."""
        fields = _validate(fields)
        with self._lock:
            event = self._require(event_id)
            if fields.get("status") == STARTED and event.status != STARTED:
                event.started_at = self.clock.now()
            for name, value in fields.items():
                if name == "not_before" and value is None:
                    value = self.clock.now() + MINIMUM_NOTICE[fields.get("event_type", event.event_type)]
                setattr(event, name, value)
            if event.status == SCHEDULED:
                event.started_at = None
            changes = [("changed", copy.deepcopy(event))]
            self._bump(changes)
        self._deliver()

    def remove_event(self, event_id: str) -> None:
        """Remove an event (Azure cancelled it, or it completed); KeyError if unknown."""
        with self._lock:
            event = self._require(event_id)
            del self._events[event.event_id]
            changes = [("removed", event)]
            self._bump(changes)
        self._deliver()

    def start_event(self, event_id: str) -> None:
        """Move an event to Started (NotBefore ""); no change if it already is. KeyError if unknown."""
        with self._lock:
            changes: List[Tuple[str, EmulatedEvent]] = []
            self._start(self._require(event_id), changes)
            self._bump(changes)
        self._deliver()

    def approve(self, event_id: str, vm_name: str) -> bool:
        """What an approval POST does: record it; True if the EventId is known (GUIDs match case-insensitively).

        Approving an already approved or Started event is still True (the doc: "200 ... even if
        another VM already approved the event"). With `auto_start`, a Scheduled event starts.
        """
        return not self.approve_many([event_id], vm_name)

    def approve_many(self, event_ids: Sequence[str], vm_name: str, via: str = "imds") -> List[str]:
        """One POST's StartRequests, all or nothing: returns the unknown EventIds.

        If any is unknown, nothing is approved and only the unknown ones are recorded (accepted=False).
        `via="arm"`: the Maintenance RP's acknowledge (the ARM emulator, `vm_name` says who sent it):
        Azure treats it like an approval from a VM the event lists, so it is never `foreign`.
        """
        with self._lock:
            now = self.clock.now()
            found = [(eid, self._find(eid)) for eid in event_ids]
            unknown = [eid for eid, event in found if event is None]
            changes: List[Tuple[str, EmulatedEvent]] = []
            if unknown:
                self._approvals.extend(Approval(eid, vm_name, now, accepted=False, via=via) for eid in unknown)
            else:
                for _, event in found:
                    assert event is not None
                    # Azure VM names are case-insensitive, so "foreign" compares casefolded whole names.
                    named = {r.casefold() for r in event.resources}
                    foreign = via == "imds" and vm_name.casefold() not in named
                    self._approvals.append(Approval(event.event_id, vm_name, now, True, foreign, via))
                    changes.append(("approved", copy.deepcopy(event)))
                    if self.auto_start:
                        self._start(event, changes)
            self._bump(changes, always=True)
        self._deliver()
        return unknown

    def tick(self) -> None:
        """Apply time: NotBefore passed -> Started (if auto_start); Started longer than started_ttl -> removed."""
        with self._lock:
            now = self.clock.now()
            changes: List[Tuple[str, EmulatedEvent]] = []
            for event in list(self._events.values()):
                if event.status == SCHEDULED and self.auto_start and event.not_before <= now:
                    self._start(event, changes)
                if event.status == STARTED and event.started_at is not None \
                        and now - event.started_at >= self.started_ttl:
                    del self._events[event.event_id]
                    changes.append(("removed", copy.deepcopy(event)))
            self._bump(changes)
        self._deliver()

    def wait_for(self, predicate: Callable[[], bool], timeout: float, poll: float = 0.05) -> bool:
        """Block until `predicate()` holds or `timeout` real seconds pass (like
        `threading.Condition.wait_for`).

        Wakes on every change; also re-checks every `poll` seconds after a `tick()`, so NotBefore
        and started_ttl transitions on a running clock are seen without anyone else polling.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.tick()
            with self._lock:
                seen = self._version
            if predicate():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._changed:
                if self._version == seen:
                    self._changed.wait(min(remaining, poll))

    # -- internals (callers hold the lock) ----------------------------------------------------

    def _find(self, event_id: str) -> Optional[EmulatedEvent]:
        event = self._events.get(event_id)
        if event is None and isinstance(event_id, str):
            wanted = event_id.lower()
            event = next((e for e in self._events.values() if e.event_id.lower() == wanted), None)
        return event

    def _require(self, event_id: str) -> EmulatedEvent:
        event = self._find(event_id)
        if event is None:
            raise KeyError(f"no event {event_id!r}")
        return event

    def _start(self, event: EmulatedEvent, changes: List[Tuple[str, EmulatedEvent]]) -> None:
        if event.status != STARTED:
            event.status = STARTED
            event.started_at = self.clock.now()
            changes.append(("started", copy.deepcopy(event)))

    def _bump(self, changes: Sequence[Tuple[str, EmulatedEvent]], always: bool = False) -> None:
        if any(kind != "approved" for kind, _ in changes):
            self._incarnation += 1
        self._undelivered.extend(changes)
        if changes or always:
            self._version += 1
            self._changed.notify_all()

    def _deliver(self) -> None:
        """Call listeners outside the state lock, every change once, in the order it happened.

        One thread delivers at a time; a thread that finds another delivering leaves its changes
        to that one (the deliverer re-checks after letting go), so a listener that waits on
        another thread changing the group cannot deadlock it.
        """
        while True:
            if not self._delivering.acquire(blocking=False):
                return
            try:
                while True:
                    with self._lock:
                        if not self._undelivered:
                            break
                        kind, event = self._undelivered.popleft()
                        listeners = list(self._listeners)
                    for fn in listeners:
                        try:
                            fn(kind, event)
                        except Exception:  # a broken listener must not break the emulator
                            log.exception("placement-group listener failed on %s", kind)
            finally:
                self._delivering.release()
            with self._lock:
                if not self._undelivered:
                    return


def event_fields_from_mapping(data: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK, new: bool = True) -> Dict[str, Any]:
    """Keyword arguments for `add_event`/`update_event` from IMDS-style JSON (admin endpoint, --scenario).

    Keys: EventType, Resources, NotBefore (RFC 1123 or epoch seconds), NotBeforeIn (seconds from
    now), EventId, EventStatus, Description, EventSource, DurationInSeconds. A `new` event needs
    EventType and Resources; a change (`new=False`) may give any subset.
    """
    if not isinstance(data, Mapping):
        raise UsageError("an event must be a JSON object")
    names = {
        "EventType": "event_type", "Resources": "resources", "NotBefore": "not_before",
        "EventId": "event_id", "EventStatus": "status", "Description": "description",
        "EventSource": "event_source", "DurationInSeconds": "duration_in_seconds",
    }
    unknown = set(data) - set(names) - {"NotBeforeIn"}
    if unknown:
        raise UsageError(f"unknown event key(s): {', '.join(sorted(unknown))}")
    missing = [k for k in ("EventType", "Resources") if new and k not in data]
    if missing:
        raise UsageError(f"an event needs {' and '.join(missing)}")
    out = {names[k]: v for k, v in data.items() if k in names}
    if "NotBeforeIn" in data:
        out["not_before"] = clock.now() + check_not_before_in(data["NotBeforeIn"], "NotBeforeIn")
    return out


def check_not_before_in(value: Any, name: str) -> float:
    """Seconds from now as a finite number within +-MAX_NOT_BEFORE_IN; UsageError (one line) if not."""
    seconds = None if isinstance(value, bool) else strict_decimal(value)
    if seconds is None or abs(seconds) > MAX_NOT_BEFORE_IN:
        raise UsageError(f"invalid {name} {value!r}: seconds from now, at most {MAX_NOT_BEFORE_IN:.0f} (a year)")
    return seconds
