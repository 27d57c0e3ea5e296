"""Resource Graph as a central source: every scheduled event of the scope in one paged query of
`maintenanceresources`, and the scale sets those events belong to (`ScaleSetDirectory`).

Why two small queries rather than one per set: an estate of 10,000 scale sets with 50 pending
events costs one page of event rows, plus -- only when events of sets not seen lately appear -- one
page of those sets' rows (their tags for the scope, their OS type for Run Command, their
orchestration for VM ids). Paging, completeness checks (`totalRecords`, truncation, `$skipToken`
loops) and throttling are fleet's (`FleetSession.query_rows` and its per-subscription throttle):
an answer that cannot be the whole table is an incomplete batch, never "no events".

Rows are only published for sets whose `scheduledEventsPolicy` enables
`eventGridAndResourceGraph` (preview; docs/central.md).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from vmss_terminate.central.source import CentralEvent, ScaleSetRef, SourceBatch, event_from_fields
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet.scope import Scope, glob_to_regex, is_subscription_id, kql_string
from vmss_terminate.fleet.session import FleetSession

log = logging.getLogger(__name__)

EVENT_TYPE = "microsoft.maintenance/scheduledevents"
EVENT_COLUMNS = ("id", "name", "type", "subscriptionId", "resourceGroup", "location", "properties")
_EVENT_SUFFIX = "/providers/microsoft.maintenance/scheduledevents/"
MAX_IDS_PER_QUERY = 200
"""Scale set ids named in one `where id in~ (...)` (a query stays well under Resource Graph's size limit)."""
DIRECTORY_TTL = 300.0
"""Seconds a scale set's row (tags, OS type, orchestration) is trusted before it is read again."""


def events_query(scope: Scope) -> str:
    """The maintenanceresources query for this scope's resource groups (names and tags are checked
    on the sets' own rows: event rows carry neither)."""
    lines = ["maintenanceresources", f"| where type =~ {kql_string(EVENT_TYPE)}"]
    if len(scope.resource_groups) == 1:
        lines.append(f"| where resourceGroup =~ {kql_string(scope.resource_groups[0])}")
    elif scope.resource_groups:
        lines.append(f"| where resourceGroup in~ ({', '.join(kql_string(g) for g in scope.resource_groups)})")
    lines += [f"| project {', '.join(EVENT_COLUMNS)}", "| order by id asc"]
    return "\n".join(lines)


SET_COLUMNS = (
    ("id", "id"), ("name", "name"), ("tags", "tags"), ("orchestrationMode", "properties.orchestrationMode"),
    ("osType", "properties.virtualMachineProfile.storageProfile.osDisk.osType"),
    ("windowsConfiguration", "properties.virtualMachineProfile.osProfile.windowsConfiguration"),
    ("linuxConfiguration", "properties.virtualMachineProfile.osProfile.linuxConfiguration"),
)
"""What the handler reads of a scale set's row: tags (the scope), OS type (Run Command), orchestration (VM ids)."""


def sets_query(scope: Scope, ids: Sequence[str]) -> str:
    """The scope's scale-set filters (fleet's query up to its projection), narrowed to these ids."""
    lines = scope.query().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("| project"))
    lines = lines[:at] + [f"| where id in~ ({', '.join(kql_string(i) for i in ids)})",
                          "| project " + ", ".join(n if n == p else f"{n} = {p}" for n, p in SET_COLUMNS),
                          "| order by id asc"]
    return "\n".join(lines)


def scale_set_of(event_row_id: str) -> ScaleSetRef:
    """The scale set an event row belongs to (ValueError for an id of another shape)."""
    at = event_row_id.lower().find(_EVENT_SUFFIX)
    if at <= 0:
        raise ValueError(f"not a scheduled event of a scale set: {event_row_id!r}")
    return ScaleSetRef.parse(event_row_id[:at])


def event_from_row(row: Mapping[str, Any], source: str = "resource-graph") -> CentralEvent:
    """An event row -> CentralEvent; ValueError for a row that cannot be trusted, including one whose
    id ends in another EventId than its properties.EventId (the queue source refuses the same
    mismatch): acting on it could acknowledge an event of another id."""
    row_id = str(row.get("id") or "")
    ref = scale_set_of(row_id)
    props = row.get("properties")
    if not isinstance(props, dict):
        raise ValueError(f"row {row_id!r} has no properties object")
    event = event_from_fields(ref, props, source=source)
    tail = row_id[row_id.lower().find(_EVENT_SUFFIX) + len(_EVENT_SUFFIX):].strip("/")
    if tail.lower() != event.event_id.lower():
        raise ValueError(f"row {row_id!r} names event {tail!r} but its properties.EventId is {event.event_id!r}")
    return event


@dataclass(frozen=True)
class ScaleSetInfo:
    """What the handler needs of a scale set besides its id."""

    ref: ScaleSetRef
    tags: Mapping[str, str] = field(default_factory=dict)
    os_type: str = ""  # "Windows" | "Linux" | "" (unknown)
    orchestration: str = "Uniform"

    def vm_id(self, vm_name: str) -> str:
        """A listed VM's resource id: Uniform `{set}/virtualMachines/{instance id}` (the name's
        suffix), Flexible a standalone VM of the set's resource group."""
        if self.orchestration == "Flexible":
            return (f"/subscriptions/{self.ref.subscription}/resourceGroups/{self.ref.resource_group}"
                    f"/providers/Microsoft.Compute/virtualMachines/{vm_name}")
        return f"{self.ref.id}/virtualMachines/{vm_name.rsplit('_', 1)[-1]}"


def info_from_row(row: Mapping[str, Any]) -> ScaleSetInfo:
    """A set's row (`SET_COLUMNS`) -> ScaleSetInfo; ValueError when its id is no scale set's."""
    ref = ScaleSetRef.parse(str(row.get("id") or ""))
    tags = row.get("tags") if isinstance(row.get("tags"), dict) else {}
    os_type = str(row.get("osType") or "")
    if not os_type:
        os_type = "Windows" if row.get("windowsConfiguration") else "Linux" if row.get("linuxConfiguration") else ""
    orchestration = str(row.get("orchestrationMode") or "Uniform")
    return ScaleSetInfo(ref, {str(k): str(v) for k, v in (tags or {}).items()}, os_type.capitalize(), orchestration)


class ScaleSetDirectory:
    """The scope's scale sets, read from Resource Graph by id when events name them, cached for
    `ttl` seconds. `lookup` answers None for a set the scope does not select (wrong subscription,
    resource group, name or tags, or no row at all: deleted, or outside the credential's reach)."""

    def __init__(self, session: FleetSession, scope: Scope, subscriptions: Sequence[str] = (),
                 clock: Clock = SYSTEM_CLOCK, ttl: float = DIRECTORY_TTL) -> None:
        self.session, self.scope, self.clock, self.ttl = session, scope, clock, ttl
        self.subscriptions = [s.lower() for s in subscriptions]
        self._known: Dict[str, Tuple[float, Optional[ScaleSetInfo]]] = {}
        self._lock = threading.Lock()
        self.requests = 0

    def refresh(self, refs: Iterable[ScaleSetRef]) -> None:
        """Read the rows of the sets not cached (or cached too long) in as few queries as it takes;
        AzureError when Resource Graph's answer cannot be read whole."""
        now = self.clock.now()
        with self._lock:
            stale = sorted({r.key: r for r in refs if r.key not in self._known
                            or now - self._known[r.key][0] >= self.ttl}.values(), key=lambda r: r.key)
        for at in range(0, len(stale), MAX_IDS_PER_QUERY):
            chunk = stale[at:at + MAX_IDS_PER_QUERY]
            result = self.session.query_rows(sets_query(self.scope, [r.id for r in chunk]), list(self.subscriptions),
                                             list(self.scope.management_groups))
            self.requests += result.pages
            found: Dict[str, ScaleSetInfo] = {}
            for row in result.rows:
                try:
                    info = info_from_row(row)
                except ValueError:
                    continue
                found[info.ref.key] = info
            with self._lock:
                for ref in chunk:
                    self._known[ref.key] = (now, found.get(ref.key))

    def lookup(self, ref: ScaleSetRef) -> Optional[ScaleSetInfo]:
        with self._lock:
            entry = self._known.get(ref.key)
        info = entry[1] if entry is not None else None
        return info if info is not None and self.selects(info) else None

    def selects(self, info: ScaleSetInfo) -> bool:
        """The scope's rules on a set's own row (never trusting that the query applied them)."""
        ref = info.ref
        if self.subscriptions and ref.subscription.lower() not in self.subscriptions:
            return False
        if self.scope.resource_groups and ref.resource_group.lower() not in {g.lower() for g in self.scope.resource_groups}:
            return False
        if self.scope.name and not re.match(glob_to_regex(self.scope.name), ref.name):
            return False
        return self.scope.selects_tags(info.tags)


def resolve_subscriptions(session: FleetSession, scope: Scope) -> List[str]:
    """Subscription ids to query: the scope's ids as given, display names looked up (one
    `GET /subscriptions`); none given = every subscription the credential sees (Resource Graph's
    tenant scope, no listing needed)."""
    given = list(scope.subscriptions)
    if all(is_subscription_id(s) for s in given):
        return [s.lower() for s in given]
    listed = session.list_subscriptions()
    out: List[str] = []
    for wanted in given:
        if is_subscription_id(wanted):
            out.append(wanted.lower())
            continue
        matches = [str(s.get("subscriptionId")) for s in listed if str(s.get("displayName") or "") == wanted]
        if len(matches) != 1:
            raise AzureError(f"--subscription {wanted!r}: {'no' if not matches else 'more than one'} subscription "
                             "the credential sees has that display name; give its id")
        out.append(matches[0].lower())
    return out


class ResourceGraphSource:
    """`EventSource` over Resource Graph: one paged maintenanceresources query per poll."""

    name = "resourcegraph"

    def __init__(self, session: FleetSession, scope: Scope, subscriptions: Sequence[str] = ()) -> None:
        self.session, self.scope = session, scope
        self.subscriptions = list(subscriptions)
        self.query = events_query(scope)

    def poll(self) -> SourceBatch:
        batch = SourceBatch()
        stats = self.session.throttle.stats
        throttled_before = sum(stats.throttled.values())
        waits_before = self.session.graph_quota_waits
        try:
            result = self.session.query_rows(self.query, self.subscriptions, list(self.scope.management_groups))
        except AzureError as exc:
            batch.complete, batch.problem = False, str(exc)
            return batch
        finally:
            batch.throttled = sum(stats.throttled.values()) - throttled_before
            batch.quota_waits = self.session.graph_quota_waits - waits_before
        batch.requests = result.pages
        seen: Set[str] = set()
        for row in result.rows:
            try:
                event = event_from_row(row, self.name)
            except ValueError as exc:
                # a row we cannot read may be an event we must not miss: the answer is incomplete
                batch.complete = False
                batch.problem = f"Resource Graph answered an event row that cannot be read: {exc}"
                log.warning("%s", batch.problem)
                continue
            if event.key not in seen:
                seen.add(event.key)
                batch.events.append(event)
        return batch

    def settle(self, event: CentralEvent) -> None:
        """Nothing to do: the table forgets an event by itself."""

    def close(self) -> None:
        """The session is the caller's."""
