"""A Storage queue message that Event Grid delivered -> the scheduled event it carries (pure).

What arrives, and why both spellings are read:

* **Encoding.** Event Grid puts one event per queue message, its JSON text base64-encoded: that is
  what subscriptions deliver today (MicrosoftDocs/azure-docs#102923, 2022: "messages pushed by
  EventGrid are base64 encoded"; dapr/components-contrib#232 shows such a message decoded). Learn's
  quickstart still says "plain text format" (articles/event-grid/custom-event-to-queue-storage.md),
  which was true before, and a team may enqueue events itself: plain JSON is read too. A body is
  plain JSON when it starts with `{` or `[` (base64 never does), base64 otherwise.
* **Schema.** The subscription's `eventDeliverySchema` is `EventGridSchema` (id, topic, subject,
  eventType, eventTime, data, dataVersion, metadataVersion) or `CloudEventSchemaV1_0` (specversion
  "1.0", id, source, type, subject, time, data). Both carry the same `data`.
* **Event type.** Learn gives two strings for the same notification: the example payload's
  `Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted` and the field table's
  `microsoft.maintenance/scheduledevents/write` (MicrosoftDocs/azure-compute-docs,
  articles/virtual-machines/scheduled-events-event-grid.md). Both are accepted, case-insensitively.
* **Data.** `data.resourceInfo.properties` is the scheduled event (EventId, EventType, Resources,
  EventStatus, NotBefore, ...): the same fields as IMDS and Resource Graph, so `central.source`'s
  `event_from_fields` reads it into the `CentralEvent` every source hands the handler. The event's ARM id is `data.resourceInfo.id` (or the subject):
  `/subscriptions/{s}/resourceGroups/{g}/providers/Microsoft.Compute/virtualMachineScaleSets/{set}/
  providers/microsoft.maintenance/scheduledevents/{EventId}`. Its last segment must be the EventId:
  an id that disagrees with itself is refused, never acknowledged.
* **Duplicates.** "In rare cases the same notification might be broadcasted to the system topic
  multiple times ... Both events have the same ID value" (the same page): `delivery_id` is that id.

A message that is none of this raises `Malformed` with a one-line reason, the reason the consumer
writes into the poison queue.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

from vmss_terminate import scheduled_events
from vmss_terminate.central.source import CentralEvent, ScaleSetRef, event_from_fields
from vmss_terminate.pipeline.events import same_name

__all__ = [
    "EVENT_TYPES", "SYSTEM_TOPIC_TYPE", "Malformed", "Notification", "decode_body", "parse_message",
    "parse_event", "event_grid_schema", "cloud_event", "encode_body", "SCOPE_PATTERN",
]

SYSTEM_TOPIC_TYPE = scheduled_events.EVENT_GRID_TOPIC_TYPE
EMITTED = scheduled_events.EVENT_GRID_EMITTED
WRITE = scheduled_events.EVENT_GRID_WRITE
EVENT_TYPES: Tuple[str, ...] = scheduled_events.EVENT_GRID_TYPES
"""The two event-type strings Learn gives for a scheduled event on the system topic."""

SCOPE_PATTERN = re.compile(
    r"^/subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<group>[^/]+)/providers/"
    r"Microsoft\.Compute/virtualMachineScaleSets/(?P<name>[^/]+)/"
    r"providers/microsoft\.maintenance/scheduledevents/(?P<event_id>[^/]+)$", re.IGNORECASE)
"""A scale set's scheduled event's ARM id; the last segment is the EventId. (A standalone VM's events
have `virtualMachines/{vm}` there: not this product's, which handles scale sets.)"""

MAX_BODY = 64 * 1024  # a Storage queue message is at most 64 KiB


class Malformed(ValueError):
    """The message is not a scheduled event Event Grid could have sent; str() is the one-line reason."""


@dataclass(frozen=True)
class Notification:
    """One scheduled event as Event Grid delivered it: the delivery (id, type, schema, time) and the event."""

    delivery_id: str      # Event Grid's id (CloudEvents `id`): the same for a duplicate broadcast
    event_type: str       # one of EVENT_TYPES, as sent
    schema: str           # "EventGridSchema" or "CloudEventSchemaV1_0"
    event_time: str       # eventTime / time, as sent
    resource_id: str      # the scheduled event's ARM id (data.resourceInfo.id)
    not_before_raw: str   # NotBefore exactly as sent ("" for a Started event)
    event: CentralEvent   # data.resourceInfo.properties, tied to its scale set

    @property
    def event_id(self) -> str:
        return self.event.event_id

    @property
    def status(self) -> str:
        return self.event.status

    @property
    def scale_set(self) -> ScaleSetRef:
        return self.event.scale_set

    @property
    def change(self) -> str:
        """Which change of the event this is: its status and NotBefore. Two deliveries of the same
        change of the same event are duplicates, whatever their delivery ids."""
        return f"{self.event.status}|{self.not_before_raw}"

    @property
    def dedup_key(self) -> Tuple[str, str]:
        return (self.event.event_id.lower(), self.change)


def decode_body(body: str) -> Any:
    """The JSON value of a queue message's text, base64-encoded (what Event Grid sends) or plain."""
    if not isinstance(body, str):
        raise Malformed("message body is not text")
    if len(body) > MAX_BODY * 2:
        raise Malformed(f"message body of {len(body)} characters is larger than a queue message can be")
    text = body.strip()
    if not text:
        raise Malformed("empty message")
    if text[0] not in "{[":
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise Malformed("message is neither JSON nor base64-encoded JSON") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed("base64 message does not decode to UTF-8 text") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Malformed(f"message is not JSON: {str(exc)[:80]}") from None


def parse_message(body: str) -> List[Notification]:
    """Every scheduled event in one queue message (Event Grid sends one; an array of them is read too).
    Raises Malformed for anything else, naming why."""
    value = decode_body(body)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise Malformed("message is an empty JSON array")
    return [parse_event(item) for item in items]


def _text(data: Mapping[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Malformed(f"{what} has no {key}")
    return value


def parse_event(item: Any) -> Notification:
    """One Event Grid (or CloudEvents 1.0) event -> Notification; Malformed names what is wrong."""
    if not isinstance(item, Mapping):
        raise Malformed("event is not a JSON object")
    if "specversion" in item:
        if item.get("specversion") != "1.0":
            raise Malformed(f"CloudEvents specversion {item.get('specversion')!r} is not 1.0")
        schema, type_key, time_key = scheduled_events.CLOUD_EVENT_SCHEMA, "type", "time"
    else:
        schema, type_key, time_key = scheduled_events.EVENT_GRID_SCHEMA, "eventType", "eventTime"
    delivery_id = _text(item, "id", "event")
    event_type = _text(item, type_key, "event")
    if not any(same_name(event_type, known) for known in EVENT_TYPES):
        raise Malformed(f"event type {event_type[:120]!r} is not a scheduled event "
                        f"(expected {EMITTED} or {WRITE}): check the subscription's event type filter")
    data = item.get("data")
    if not isinstance(data, Mapping):
        raise Malformed("event has no data object")
    info = data.get("resourceInfo")
    if not isinstance(info, Mapping) or not isinstance(info.get("properties"), Mapping):
        raise Malformed("event data has no resourceInfo.properties")
    props = info["properties"]
    resource_id = info.get("id") if isinstance(info.get("id"), str) else item.get("subject")
    if not isinstance(resource_id, str):
        raise Malformed("event has neither data.resourceInfo.id nor a subject")
    match = SCOPE_PATTERN.match(resource_id.strip())
    if match is None:
        raise Malformed(f"{resource_id[:200]!r} is not a scheduled event id of a scale set")
    scale_set = ScaleSetRef(match.group("subscription"), match.group("group"), match.group("name"))
    try:
        event = event_from_fields(scale_set, props, source="queue")
    except (ValueError, TypeError, OverflowError, IndexError) as exc:
        raise Malformed(f"scheduled event unreadable: {str(exc)[:200]}") from None
    if not same_name(match.group("event_id"), event.event_id):
        raise Malformed(f"the id ends in {match.group('event_id')!r} but EventId is {event.event_id!r}")
    subject = item.get("subject")
    if isinstance(subject, str) and subject.strip() and not same_name(subject.strip().rstrip("/"),
                                                                       resource_id.strip().rstrip("/")):
        raise Malformed("subject and data.resourceInfo.id name different scheduled events")
    not_before = props.get("NotBefore")
    return Notification(
        delivery_id=delivery_id, event_type=event_type, schema=schema,
        event_time=str(item.get(time_key) or ""), resource_id=resource_id.strip(),
        not_before_raw=not_before if isinstance(not_before, str) else "", event=event)


# --- writing them: what Event Grid would send (shared with the ARM emulator: scheduled_events) ---

event_grid_schema = scheduled_events.event_grid_event
cloud_event = scheduled_events.cloud_event
encode_body = scheduled_events.queue_message_text
