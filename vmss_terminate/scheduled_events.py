"""Facts about Azure Scheduled Events that both sides need, in one place (stdlib only).

The agent (which reads IMDS) and the IMDS emulator (which plays it) import these, so the two can
never disagree on a type name, a status, the NotBefore format or what an api-version returns.
Sources: the Scheduled Events doc and the IMDS doc (excerpts in `/work/shared/reference/`).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any, Dict, Optional, Tuple

#: Who started an event (`EventSource`, from 2019-08-01).
EVENT_SOURCES: Tuple[str, ...] = ("Platform", "User")

#: Event statuses. `Scheduled` waits for NotBefore (or an approval); `Started` has NotBefore "".
SCHEDULED = "Scheduled"
STARTED = "Started"
STATUSES: Tuple[str, ...] = (SCHEDULED, STARTED)

#: NotBefore is RFC 1123 in GMT (`format_not_before` writes it, `pipeline/events.py` reads it).
NOT_BEFORE_EXAMPLE = "Mon, 19 Sep 2016 18:29:47 GMT"


def format_not_before(epoch: float) -> str:
    """RFC 1123, as IMDS writes NotBefore: `Mon, 19 Sep 2016 18:29:47 GMT`."""
    return formatdate(epoch, usegmt=True)


#: The documented `/metadata/scheduledevents` api-versions, oldest first.
SCHEDULED_EVENTS_VERSIONS: Tuple[str, ...] = (
    "2017-03-01", "2017-08-01", "2017-11-01", "2019-01-01", "2019-04-01", "2019-08-01", "2020-07-01",
)
#: The first version with Terminate events: the agent's default and its minimum.
TERMINATE_SINCE = "2019-01-01"
DEFAULT_API_VERSION = TERMINATE_SINCE
#: The version that introduced each optional event field (2019-01-01 has none of them, azure-docs#58422).
EVENT_FIELD_SINCE: Dict[str, str] = {
    "Description": "2019-04-01", "EventSource": "2019-08-01", "DurationInSeconds": "2020-07-01",
}
#: Until this version IaaS VM names in Resources had a leading underscore.
UNDERSCORE_UNTIL = "2017-08-01"


@dataclass(frozen=True)
class EventTypeFacts:
    """Everything this project knows about one event type, in one record (`EVENT_TYPE_FACTS`).

    `minimum_notice` is the Scheduled Events doc's "Minimum notice" (seconds; Terminate's is
    user-configurable, PT5M..PT15M: the smallest here, the largest in `maximum_notice`); `since`
    the api-version that introduced it; `departs`: the VM does not come back after it (its node
    is never uncordoned once it started or was approved); `drains_node`: `--kubernetes` may drain
    the node for it (never for a Freeze: a pause of seconds, the pods stay)."""

    name: str
    minimum_notice: float
    since: str
    departs: bool
    drains_node: bool
    maximum_notice: Optional[float] = None  # None: the notice is fixed (the minimum)


#: One record per event type, in the order this project lists them (Terminate first: what we drain for).
#: The policy, the agent and the IMDS emulator read these; the views below are derived from them.
EVENT_TYPE_FACTS: Dict[str, EventTypeFacts] = {f.name: f for f in (
    EventTypeFacts("Terminate", 5 * 60.0, TERMINATE_SINCE, departs=True, drains_node=True,
                   maximum_notice=15 * 60.0),
    EventTypeFacts("Reboot", 15 * 60.0, SCHEDULED_EVENTS_VERSIONS[0], departs=False, drains_node=True),
    EventTypeFacts("Redeploy", 10 * 60.0, SCHEDULED_EVENTS_VERSIONS[0], departs=False, drains_node=True),
    EventTypeFacts("Freeze", 15 * 60.0, SCHEDULED_EVENTS_VERSIONS[0], departs=False, drains_node=False),
    EventTypeFacts("Preempt", 30.0, "2017-11-01", departs=True, drains_node=True),
)}

#: Event types, in the order this project lists them.
EVENT_TYPES: Tuple[str, ...] = tuple(EVENT_TYPE_FACTS)
#: The version that introduced each event type that did not exist from the start.
EVENT_TYPE_SINCE: Dict[str, str] = {f.name: f.since for f in EVENT_TYPE_FACTS.values()
                                    if f.since != SCHEDULED_EVENTS_VERSIONS[0]}
#: The "Minimum notice" table, in seconds.
MINIMUM_NOTICE: Dict[str, float] = {f.name: f.minimum_notice for f in EVENT_TYPE_FACTS.values()}
#: NotBefore is never further away than this (Terminate's largest notice).
MAX_TERMINATE_NOTICE = EVENT_TYPE_FACTS["Terminate"].maximum_notice or 0.0
#: Event types after which the VM does not come back.
DEPARTING: Tuple[str, ...] = tuple(f.name for f in EVENT_TYPE_FACTS.values() if f.departs)
#: Event types `--kubernetes` never drains a node for.
NO_NODE_DRAIN: Tuple[str, ...] = tuple(f.name for f in EVENT_TYPE_FACTS.values() if not f.drains_node)

#: The subscription id the emulators and the sandbox use when none is given.
DEFAULT_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


_VM_NAME_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f~!@#$%^&*()=+\[\]{}\\|;:'\",<>/?`]")
MAX_VM_NAME = 64        # a VM's own resource name
MAX_SCALE_SET_NAME = 64  # a scale set's name, which its instances' names start with
# `{scale set}_{instance id}` (Uniform: a decimal number, no documented bound; 19 digits is int64)
# or `{scale set}_{8 hex}` (Flexible)
_SCALE_SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # control/names.py's rule (length checked apart)
_INSTANCE_NAME = re.compile(r"^(?P<scale_set>.+)_(?:[0-9]{1,19}|[0-9A-Fa-f]{8})$", re.DOTALL)


def vm_name_problem(name: str) -> Optional[str]:
    """Why no Azure VM can have this name (None if one can): the names `Resources` lists and IMDS
    `compute.name` gives. Azure's rules for a VM resource name: 1..64 characters; no spaces,
    control characters or `~ ! @ # $ % ^ & * ( ) = + [ ] { } \\ | ; : ' " , < > / ?`; not ending
    with `.` or `-`. Scale-set instances are `{scale-set}_{instance id}` (Uniform) or
    `{scale-set}_{8 hex}` (Flexible), within those rules except the length: a scale set's name
    alone may have 64 characters, so `{64 characters}_1234` (69) is an instance Azure can create."""
    if not name or (len(name) > MAX_VM_NAME and not _scale_set_instance(name)):
        return (f"Azure VM names are 1-{MAX_VM_NAME} characters (a scale set instance's: its scale set's name "
                f"of 1-{MAX_SCALE_SET_NAME}, '_' and its instance id)")
    if _VM_NAME_FORBIDDEN.search(name):
        return "Azure VM names have no spaces, control characters or ~!@#$%^&*()=+[]{}\\|;:'\",<>/?"
    if name[-1] in ".-":
        return "Azure VM names do not end with '.' or '-'"
    match = _INSTANCE_NAME.match(name)
    if match is not None and not _SCALE_SET_NAME.match(match.group("scale_set")):
        # `{scale set}_{id}`: the scale set part follows the scale set rule (control/names.py), ASCII only
        return ("a scale set instance's name is its scale set's name (ASCII letters, digits, '_', '.' or '-', "
                "starting with a letter or digit), '_' and its instance id")
    return None


def _scale_set_instance(name: str) -> bool:
    """`name` is a scale set's name of at most `MAX_SCALE_SET_NAME` characters, `_` and an instance id."""
    match = _INSTANCE_NAME.match(name)
    return match is not None and len(match.group("scale_set")) <= MAX_SCALE_SET_NAME


# --- Event Grid: how Azure pushes the same events (the central handler's queue source reads them,
# the ARM emulator writes them). MicrosoftDocs/azure-compute-docs,
# articles/virtual-machines/scheduled-events-event-grid.md: the system topic type, the two event-type
# strings, and the example payload these writers reproduce.

#: The Event Grid system topic type that carries scheduled events.
EVENT_GRID_TOPIC_TYPE = "Microsoft.ResourceNotifications.MaintenanceResources"
#: The example payload's event type, and the one the page's field table gives.
EVENT_GRID_EMITTED = "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"
EVENT_GRID_WRITE = "microsoft.maintenance/scheduledevents/write"
EVENT_GRID_TYPES: Tuple[str, ...] = (EVENT_GRID_EMITTED, EVENT_GRID_WRITE)
#: An event subscription's `eventDeliverySchema` values this project reads and writes.
EVENT_GRID_SCHEMA = "EventGridSchema"
CLOUD_EVENT_SCHEMA = "CloudEventSchemaV1_0"


def event_grid_event(resource_id: str, properties: Dict[str, Any], *, delivery_id: str, event_time: str,
                     location: str = "eastus", event_type: str = EVENT_GRID_EMITTED) -> Dict[str, Any]:
    """One scheduled event in the Event Grid schema, shaped as Learn's example payload. `resource_id`
    is the event's ARM id (`{scale set id}/providers/microsoft.maintenance/scheduledevents/{EventId}`)."""
    parts = resource_id.split("/")
    subscription = parts[2] if len(parts) > 2 and parts[1].lower() == "subscriptions" else ""
    return {
        "id": delivery_id,
        "topic": f"/subscriptions/{subscription}",
        "subject": resource_id,
        "data": {
            "resourceInfo": {
                "id": resource_id,
                "name": str(properties.get("EventId", "")),
                "type": "microsoft.maintenance/scheduledevents",
                "location": location,
                "properties": dict(properties),
            },
            "apiVersion": "2024-07-01",
        },
        "eventType": event_type,
        "dataVersion": "3.0",
        "metadataVersion": "1",
        "eventTime": event_time,
    }


def cloud_event(resource_id: str, properties: Dict[str, Any], *, delivery_id: str, event_time: str,
                location: str = "eastus", event_type: str = EVENT_GRID_EMITTED) -> Dict[str, Any]:
    """The same event in the CloudEvents 1.0 schema (Event Grid maps topic -> source, eventType -> type)."""
    grid = event_grid_event(resource_id, properties, delivery_id=delivery_id, event_time=event_time,
                            location=location, event_type=event_type)
    return {"specversion": "1.0", "id": delivery_id, "source": grid["topic"], "subject": resource_id,
            "type": event_type, "time": event_time, "datacontenttype": "application/json", "data": grid["data"]}


def queue_message_text(event: Dict[str, Any], *, base64_encoded: bool = True) -> str:
    """A Storage queue message's text for one event: base64 of its UTF-8 JSON, as Event Grid writes it
    to a queue (MicrosoftDocs/azure-docs#102923), or the JSON itself."""
    text = json.dumps(event, separators=(",", ":"))
    return base64.b64encode(text.encode("utf-8")).decode("ascii") if base64_encoded else text
