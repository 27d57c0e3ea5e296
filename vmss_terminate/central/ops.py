"""One-shot operations behind `vmss-terminate events list` and `events approve`.

`list_events` reads the scope's scheduled events from Resource Graph (one maintenanceresources
query, plus the sets' own rows to apply the scope's selectors); an incomplete answer fails it
(AzureError, exit 1), never a short list. `approve_events` acknowledges events of one scale set
through the Maintenance RP now (batch form for several) and returns what Azure answered per event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from vmss_terminate.central.graph import ResourceGraphSource, ScaleSetDirectory, ScaleSetInfo, resolve_subscriptions
from vmss_terminate.central.maintenance import AckResult, MaintenanceClient
from vmss_terminate.central.source import CentralEvent, ScaleSetRef
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.connection import Connection
from vmss_terminate.errors import AzureError, UsageError
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.fleet.session import FleetSession
from vmss_terminate.scheduled_events import SCHEDULED, STARTED

_EVENT_ID = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")
COLUMNS = ("scale_set", "event_id", "type", "status", "vms", "not_before", "seconds_left")


@dataclass
class ListedEvent:
    event: CentralEvent
    info: ScaleSetInfo
    seconds_left: Optional[float]

    def to_dict(self) -> Dict[str, Any]:
        e = self.event
        return {
            "scale_set_id": e.scale_set.id, "scale_set": str(e.scale_set), "subscription_id": e.scale_set.subscription,
            "event_id": e.event_id, "type": e.event_type, "status": e.status, "vms": list(e.resources),
            "vm_ids": [self.info.vm_id(vm) for vm in e.resources], "not_before": e.fields()["NotBefore"],
            "seconds_left": None if self.seconds_left is None else round(self.seconds_left),
            "description": e.description, "event_source": e.event_source, "os_type": self.info.os_type,
        }

    def row(self) -> Dict[str, Any]:
        data = self.to_dict()
        return {"scale_set": data["scale_set"], "event_id": data["event_id"], "type": data["type"],
                "status": data["status"], "vms": ",".join(data["vms"]), "not_before": data["not_before"],
                "seconds_left": "" if data["seconds_left"] is None else data["seconds_left"]}


@dataclass
class EventsReport:
    events: List[ListedEvent] = field(default_factory=list)
    out_of_scope: int = 0
    requests: int = 0

    def to_dict(self) -> List[Dict[str, Any]]:
        return [e.to_dict() for e in self.events]

    def lines(self) -> List[str]:
        if not self.events:
            return ["no pending scheduled events in scope"]
        rows = [e.row() for e in self.events]
        widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS}
        out = ["  ".join(c.upper().replace("_", " ").ljust(widths[c]) for c in COLUMNS).rstrip()]
        out += ["  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS).rstrip() for r in rows]
        return out


def list_events(scope: Optional[Scope] = None, *, connection: Optional[Connection] = None,
                scale_set_ids: Sequence[str] = (), include_done: bool = False, clock: Clock = SYSTEM_CLOCK,
                session: Optional[FleetSession] = None) -> EventsReport:
    """Pending (Scheduled and Started; `include_done`: also Completed and Canceled) scheduled
    events of the scale sets in `scope` (and among `scale_set_ids` when given)."""
    scope = scope or Scope()
    wanted = {ScaleSetRef.parse(i).key for i in scale_set_ids} if scale_set_ids else set()
    owned = session is None
    session = session or FleetSession(connection, clock)
    try:
        subscriptions = resolve_subscriptions(session, scope)
        batch = ResourceGraphSource(session, scope, subscriptions).poll()
        if not batch.complete:
            raise AzureError(f"{batch.problem}: refusing an incomplete list of scheduled events")
        events = [e for e in batch.events if include_done or e.status in (SCHEDULED, STARTED)]
        events = [e for e in events if not wanted or e.scale_set.key in wanted]
        directory = ScaleSetDirectory(session, scope, subscriptions, clock)
        directory.refresh(e.scale_set for e in events)
        report = EventsReport(requests=batch.requests + directory.requests)
        now = clock.now()
        for event in events:
            info = directory.lookup(event.scale_set)
            if info is None:
                report.out_of_scope += 1
                continue
            left = None if event.not_before is None else event.not_before - now
            report.events.append(ListedEvent(event, info, left))
        report.events.sort(key=lambda e: (e.event.not_before or 0.0, e.event.scale_set.key, e.event.event_id))
        return report
    finally:
        if owned:
            session.close()


def check_event_ids(event_ids: Sequence[str]) -> List[str]:
    """EventIds are GUIDs (the Maintenance RP's scheduledEventId); UsageError otherwise."""
    if not event_ids:
        raise UsageError("give at least one EVENT_ID")
    for event_id in event_ids:
        if not _EVENT_ID.match(event_id):
            raise UsageError(f"invalid EVENT_ID {event_id!r}: a scheduled event id is a GUID "
                             "(00000000-0000-0000-0000-000000000000)")
    return list(dict.fromkeys(event_ids))


def parse_scale_set_id(scale_set_id: str) -> ScaleSetRef:
    try:
        return ScaleSetRef.parse(scale_set_id)
    except ValueError:
        raise UsageError(f"invalid --scale-set-id {scale_set_id!r}: use /subscriptions/SUB/resourceGroups/RG/"
                         "providers/Microsoft.Compute/virtualMachineScaleSets/NAME") from None


def approve_events(scale_set_id: str, event_ids: Sequence[str], *, connection: Optional[Connection] = None,
                   clock: Clock = SYSTEM_CLOCK, session: Optional[FleetSession] = None) -> List[AckResult]:
    """Acknowledge these events of one scale set now; what Azure answered per event."""
    ref = parse_scale_set_id(scale_set_id)
    ids = check_event_ids(event_ids)
    owned = session is None
    session = session or FleetSession(connection, clock)
    try:
        return MaintenanceClient(session).acknowledge(ref, ids)
    finally:
        if owned:
            session.close()
