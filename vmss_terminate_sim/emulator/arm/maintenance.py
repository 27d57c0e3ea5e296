"""Scheduled events as ARM sees them: Resource Graph's `maintenanceresources` rows and the
Maintenance resource provider's acknowledge operations, over the same event lists the IMDS
emulators serve.

A scale set's placement group (`emulator/imds/events.PlacementGroup`, or anything with its
`snapshot`, `add_listener` and `approve_many` methods) is attached to the ARM state with
`state.maintenance.attach(scale_set, group)`; the sandbox does it for its scale set. From then on:

* Resource Graph serves one `maintenanceresources` row per event (type
  `microsoft.maintenance/scheduledevents`, id `{scale set id}/providers/Microsoft.Maintenance/
  scheduledevents/{EventId}`, `properties` = the IMDS fields) while the set's model publishes them:
  `scheduledEventsPolicy.scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph.enable`
  is true (`publishes()`). Statuses: `Scheduled` and `Started` as IMDS shows them; an event that
  leaves the group after it started is `Completed`, one that leaves before is `Canceled`; such rows
  stay `retention` seconds (clock seconds; Azure documents no retention, 600 by default).
* `acknowledge(scale_set, ids, by)` is the Maintenance RP's POST: each EventId the set's group
  holds is approved there exactly like an IMDS approval (`via="arm"`), so the sandbox's deletion
  rules (or the group's auto start) start it; an unknown id is a 404 for that id. Every attempt is
  recorded (`acknowledgements`), including ids of another scale set's events (`foreign`: the worst
  bug a central handler can have).

Azure documents Resource Graph's freshness for these rows nowhere we found: `publish_delay`
(clock seconds, 0 by default) holds a new event back from the rows to play a lagging table.
Imports nothing of the ARM state (the state holds this object; the types are duck-typed).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock

TYPE = "microsoft.maintenance/scheduledevents"
COMPLETED = "Completed"
CANCELED = "Canceled"
DEFAULT_RETENTION = 600.0
ACKNOWLEDGE_API_VERSIONS = ("2023-10-01-preview", "2025-10-01-preview")
BATCH_API_VERSIONS = ("2025-10-01-preview",)
APPROVED = "Successfully Approved"


class EventGroup(Protocol):
    """What the state needs of a placement group (PlacementGroup has all of it)."""

    def snapshot(self) -> Tuple[int, List[Any]]: ...

    def add_listener(self, fn: Any) -> None: ...

    def approve_many(self, event_ids: Sequence[str], vm_name: str, via: str = "imds") -> List[str]: ...


@dataclass(frozen=True)
class Acknowledgement:
    """One EventId in one acknowledge request. `accepted` False: 404 (not an event of that set
    now); `foreign`: the id is an event of another attached scale set."""

    scale_set_id: str
    event_id: str
    at: float
    by: str
    accepted: bool
    foreign: bool = False
    batch: bool = False


@dataclass
class _Gone:
    fields: Dict[str, Any]
    status: str
    at: float


def publishes(scale_set: Any) -> bool:
    """Whether the set's model publishes its events to Event Grid and Resource Graph
    (`ScaleSetRecord.publishes_to_event_grid`, the stored scheduledEventsPolicy)."""
    return bool(scale_set.publishes_to_event_grid)


class MaintenanceEvents:
    """Attached placement groups per scale set, the rows they make, and acknowledgements."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, retention: float = DEFAULT_RETENTION) -> None:
        self.clock = clock
        self.retention = retention
        self.publish_delay = 0.0
        self.always_publish = False  # tests of the table alone: publish whatever the policy says
        self._lock = threading.Lock()
        self._groups: Dict[str, Tuple[Any, EventGroup]] = {}  # lower-case set id -> (set, group)
        self._gone: Dict[str, Dict[str, _Gone]] = {}
        self._seen: Dict[str, float] = {}  # event key -> when it was first in a group (publish_delay)
        self._acks: List[Acknowledgement] = []
        self._subscribers: List[Callable[[Any, Dict[str, Any]], None]] = []

    def attach(self, scale_set: Any, group: EventGroup) -> None:
        key = scale_set.resource_id.lower()
        with self._lock:
            self._groups[key] = (scale_set, group)
            self._gone.setdefault(key, {})
        group.add_listener(lambda kind, event: self._on_change(key, kind, event))

    def attached(self, scale_set: Any) -> bool:
        with self._lock:
            return scale_set.resource_id.lower() in self._groups

    @property
    def acknowledgements(self) -> List[Acknowledgement]:
        with self._lock:
            return list(self._acks)

    def foreign_acknowledgements(self) -> List[Acknowledgement]:
        return [a for a in self.acknowledgements if a.foreign]

    def subscribe(self, fn: Callable[[Any, Dict[str, Any]], None]) -> None:
        """`fn(scale_set, fields)` for every change of an event of a set that publishes (added:
        Scheduled; started; changed; removed: Completed or Canceled) -- what Event Grid pushes
        (`arm/eventgrid.py`). Approvals change no status and publish nothing."""
        with self._lock:
            self._subscribers.append(fn)

    def _on_change(self, key: str, kind: str, event: Any) -> None:
        now = self.clock.now()
        published: Optional[Dict[str, Any]] = None
        with self._lock:
            if kind == "added":
                self._seen.setdefault(f"{key}/{event.event_id.lower()}", now)
            elif kind == "removed":
                fields = event.to_imds()
                status = COMPLETED if fields.get("EventStatus") == "Started" else CANCELED
                self._gone.setdefault(key, {})[event.event_id.lower()] = _Gone(fields, status, now)
                published = dict(fields, EventStatus=status)
            if kind in ("added", "started", "changed"):
                published = event.to_imds()
            entry = self._groups.get(key)
            subscribers = list(self._subscribers)
        if published is None or entry is None or not (self.always_publish or publishes(entry[0])):
            return
        for fn in subscribers:
            fn(entry[0], published)

    def rows(self, scale_sets: Sequence[Any]) -> List[Dict[str, Any]]:
        """The maintenanceresources rows of these scale sets (those that publish), id order."""
        now = self.clock.now()
        out: List[Dict[str, Any]] = []
        for ss in scale_sets:
            key = ss.resource_id.lower()
            with self._lock:
                entry = self._groups.get(key)
                gone = dict(self._gone.get(key, {}))
            if entry is None or not (self.always_publish or publishes(ss)):
                continue
            _, events = entry[1].snapshot()
            live = set()
            for event in events:
                fields = event.to_imds()
                live.add(fields["EventId"].lower())
                with self._lock:
                    first = self._seen.setdefault(f"{key}/{fields['EventId'].lower()}", now)
                if now - first >= self.publish_delay:
                    out.append(row(ss, fields))
            for event_id, item in gone.items():
                if event_id in live:
                    continue
                if now - item.at >= self.retention:
                    with self._lock:
                        self._gone.get(key, {}).pop(event_id, None)
                    continue
                out.append(row(ss, dict(item.fields, EventStatus=item.status)))
        out.sort(key=lambda r: r["id"].lower())
        return out

    def acknowledge(self, scale_set: Any, event_ids: Sequence[str], by: str, batch: bool = False) -> Dict[str, bool]:
        """Approve each id the set's group holds now (as IMDS would); {id: accepted}."""
        key = scale_set.resource_id.lower()
        now = self.clock.now()
        with self._lock:
            entry = self._groups.get(key)
            others = [(k, g) for k, (_, g) in self._groups.items() if k != key]
        current = {e.event_id.lower() for e in entry[1].snapshot()[1]} if entry is not None else set()
        results: Dict[str, bool] = {}
        for event_id in event_ids:
            known = event_id.lower() in current
            if known and entry is not None:
                known = not entry[1].approve_many([event_id], by, via="arm")
            foreign = not known and any(event_id.lower() in {e.event_id.lower() for e in g.snapshot()[1]}
                                        for _, g in others)
            results[event_id] = known
            with self._lock:
                self._acks.append(Acknowledgement(scale_set.resource_id, event_id, now, by, known, foreign, batch))
        return results


def row(scale_set: Any, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One event as a maintenanceresources row (Resource Graph lower-cases type and resourceGroup)."""
    return {
        "id": f"{scale_set.resource_id}/providers/Microsoft.Maintenance/scheduledevents/{fields['EventId']}",
        "name": fields["EventId"],
        "type": TYPE,
        "subscriptionId": scale_set.subscription,
        "resourceGroup": scale_set.resource_group.lower(),
        "location": scale_set.location,
        "properties": dict(fields),
    }


def batch_error(results: Dict[str, bool]) -> Optional[Dict[str, Any]]:
    """The MultiStatusResponse body of a batch with refused ids (None when all were approved):
    `{"error": {"code": "MultiStatusResponse", "message", "details": [{"target", "code", "message"}]}}`
    (ScheduledEventsListAcknowledgeError, 2025-10-01-preview)."""
    if all(results.values()):
        return None
    details = [{"target": event_id, "code": "200" if ok else "404",
                "message": APPROVED if ok else f"Scheduled event '{event_id}' was not found."}
               for event_id, ok in results.items()]
    refused = sum(1 for ok in results.values() if not ok)
    return {"error": {"code": "MultiStatusResponse",
                      "message": f"{refused} of {len(results)} scheduled events could not be acknowledged.",
                      "details": details}}
