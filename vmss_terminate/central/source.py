"""What a central source hands the handler: scheduled events of scale sets, read from outside the VMs.

A source (Resource Graph's `maintenanceresources` table, an Event Grid -> Storage queue, ...) answers
`poll()` with a `SourceBatch`: every event it read, each tied to the scale set whose event it is, and
whether the answer was complete. The handler is source-agnostic: it decides from `CentralEvent`
alone, and it never reads an incomplete batch as "no events" (an event missing from an incomplete
answer is not gone; an event missing from a complete one may be).

Why the scale set travels with the event: the Maintenance resource provider acknowledges an event
on the resource that owns it (`.../virtualMachineScaleSets/{set}/providers/Microsoft.Maintenance/
scheduledevents/{EventId}/acknowledge`), and the handler acknowledges only events of sets in its scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Dict, List, Mapping, Optional, Protocol, Tuple

from vmss_terminate.scheduled_events import SCHEDULED, format_not_before

COMPLETED = "Completed"
CANCELED = "Canceled"
"""Statuses Resource Graph shows besides IMDS's Scheduled and Started (docs/central.md cites them)."""

_SCALE_SET_ID = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute/"
    r"virtualmachinescalesets/(?P<name>[^/]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class ScaleSetRef:
    """One scale set, named as ARM names it. Equal refs compare case-insensitively (`key`)."""

    subscription: str
    resource_group: str
    name: str

    @classmethod
    def parse(cls, resource_id: str) -> "ScaleSetRef":
        """`/subscriptions/{s}/resourceGroups/{g}/providers/Microsoft.Compute/virtualMachineScaleSets/{n}`
        (any case, a trailing slash tolerated); ValueError for anything else."""
        found = _SCALE_SET_ID.match(resource_id.strip().rstrip("/"))
        if not found:
            raise ValueError(f"not a scale set resource id: {resource_id!r}")
        return cls(found.group("sub"), found.group("rg"), found.group("name"))

    @property
    def id(self) -> str:
        return (f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
                f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}")

    @property
    def key(self) -> str:
        """The id in lower case: ARM compares resource ids case-insensitively."""
        return self.id.lower()

    def __str__(self) -> str:
        return f"{self.resource_group}/{self.name}"


@dataclass(frozen=True)
class CentralEvent:
    """One scheduled event of one scale set, with the fields IMDS and Resource Graph share.

    `not_before` is epoch seconds (None when Azure gave none: a Started event has NotBefore "").
    `resources` are the VM names the event lists (`Resources`); `vm_ids` maps each to its full
    resource id when the source knows the set's orchestration (else empty).
    """

    scale_set: ScaleSetRef
    event_id: str
    event_type: str
    status: str
    resources: Tuple[str, ...]
    not_before: Optional[float]
    resource_type: str = "VirtualMachine"
    description: str = ""
    event_source: str = ""
    duration_in_seconds: int = -1
    source: str = ""
    vm_ids: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        """Unique across the estate: the event id under its scale set (lower case)."""
        return f"{self.scale_set.key}/{self.event_id.lower()}"

    @property
    def pending(self) -> bool:
        """Only a Scheduled event may be acted on: Started, Completed and Canceled never are."""
        return self.status == SCHEDULED

    def fields(self) -> Dict[str, Any]:
        """The event in IMDS's wire shape (what hooks receive as JSON)."""
        return {
            "EventId": self.event_id, "EventType": self.event_type, "ResourceType": self.resource_type,
            "Resources": list(self.resources), "EventStatus": self.status,
            "NotBefore": "" if self.not_before is None else format_not_before(self.not_before),
            "Description": self.description, "EventSource": self.event_source,
            "DurationInSeconds": self.duration_in_seconds,
        }


@dataclass
class SourceBatch:
    """One poll's answer. `complete` False: some events may be missing (a page was lost, an answer
    could not be read); `problem` says why. `requests` counts what the poll sent (for metrics)."""

    events: List[CentralEvent] = field(default_factory=list)
    complete: bool = True
    problem: Optional[str] = None
    requests: int = 0
    throttled: int = 0
    quota_waits: int = 0  # queries held back until Resource Graph's user quota reset


class EventSource(Protocol):
    """A central source. `poll()` never raises for an Azure failure it can describe: it answers an
    incomplete batch naming the problem. `settle(event)` tells the source the handler is done with
    an event (acknowledged, or never to be acted on) so a queue can delete its message; a table
    source ignores it."""

    name: str

    def poll(self) -> SourceBatch: ...

    def settle(self, event: CentralEvent) -> None: ...

    def close(self) -> None: ...


def parse_not_before(value: Any) -> Optional[float]:
    """NotBefore as Azure writes it (RFC 1123; "" for a Started event) -> epoch seconds or None;
    ValueError for text that is neither."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"NotBefore {value!r} is not a string")
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"NotBefore {value!r} is not an RFC 1123 date") from None


def event_from_fields(scale_set: ScaleSetRef, data: Mapping[str, Any], source: str = "") -> CentralEvent:
    """A CentralEvent from IMDS-shaped fields (Resource Graph's `properties`, an Event Grid event's
    `data`); ValueError naming the field that cannot be read."""
    event_id = data.get("EventId")
    if not isinstance(event_id, str) or not event_id.strip():
        raise ValueError(f"event without an EventId ({event_id!r})")
    resources = data.get("Resources")
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise ValueError(f"event {event_id}: Resources {resources!r} is not a list of VM names")
    event_type, status = data.get("EventType"), data.get("EventStatus")
    if not isinstance(event_type, str) or not isinstance(status, str):
        raise ValueError(f"event {event_id}: EventType {event_type!r} / EventStatus {status!r} unreadable")
    duration = data.get("DurationInSeconds", -1)
    return CentralEvent(
        scale_set=scale_set, event_id=event_id.strip(), event_type=event_type, status=status,
        resources=tuple(resources), not_before=parse_not_before(data.get("NotBefore")),
        resource_type=str(data.get("ResourceType") or "VirtualMachine"),
        description=str(data.get("Description") or ""), event_source=str(data.get("EventSource") or ""),
        duration_in_seconds=duration if isinstance(duration, int) and not isinstance(duration, bool) else -1,
        source=source,
    )
