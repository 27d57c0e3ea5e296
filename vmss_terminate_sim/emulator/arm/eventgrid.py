"""Event Grid, played: every published change of a scheduled event goes to a Storage queue the way
an event subscription on the system topic `Microsoft.ResourceNotifications.MaintenanceResources`
delivers it.

* What is published: `MaintenanceEvents.subscribe` -- each change (Scheduled, Started, a new
  NotBefore, Completed, Canceled) of an event of a scale set whose `scheduledEventsPolicy` publishes
  to Event Grid and Resource Graph.
* How: one event per queue message, `eventDeliverySchema` `EventGridSchema` (default) or
  `CloudEventSchemaV1_0`, the JSON text base64-encoded as Event Grid writes it to a queue
  (MicrosoftDocs/azure-docs#102923; `base64=False` writes plain JSON, as older docs describe).
  Shapes: `vmss_terminate.scheduled_events.event_grid_event` / `cloud_event`, Learn's example payload.
* Faults: `duplicate_rate` delivers a change a second time with the same Event Grid id -- Learn: "In
  rare cases the same notification might be broadcasted to the system topic multiple times ... Both
  events have the same ID value" -- drawn from a seeded generator, so a run can be repeated.

Deliveries run on a thread of their own, in order; a queue that refuses one is retried a few times
and then counted in `failed` (Event Grid would dead-letter it), never raised into the emulator.
"""

from __future__ import annotations

import logging
import queue as queue_module
import random
import threading
import uuid
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from vmss_terminate import scheduled_events
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

__all__ = ["EventGridDelivery"]

log = logging.getLogger(__name__)

SCHEMAS = (scheduled_events.EVENT_GRID_SCHEMA, scheduled_events.CLOUD_EVENT_SCHEMA)


class EventGridDelivery:
    """Delivers published event changes to one Storage queue; `attach(maintenance)` subscribes it."""

    def __init__(self, writer: StorageQueueWriter, *, schema: str = scheduled_events.EVENT_GRID_SCHEMA,
                 base64: bool = True, duplicate_rate: float = 0.0, seed: Optional[int] = None,
                 event_type: str = scheduled_events.EVENT_GRID_EMITTED, location: str = "eastus") -> None:
        if schema not in SCHEMAS:
            raise ValueError(f"eventDeliverySchema {schema!r}: choose {' or '.join(SCHEMAS)}")
        if not 0.0 <= duplicate_rate <= 1.0:
            raise ValueError(f"a duplicate rate is 0..1, not {duplicate_rate}")
        self.writer = writer
        self.schema = schema
        self.base64 = base64
        self.duplicate_rate = duplicate_rate
        self.event_type = event_type
        self.location = location
        self._random = random.Random(seed)
        self._pending: "queue_module.Queue[Optional[Dict[str, Any]]]" = queue_module.Queue()
        self._lock = threading.Lock()
        self.delivered: List[Dict[str, Any]] = []  # every message sent (duplicates included), in order
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="eventgrid-delivery", daemon=True)
        self._thread.start()

    def attach(self, maintenance: Any) -> "EventGridDelivery":
        maintenance.subscribe(self.publish)
        return self

    def publish(self, scale_set: Any, fields: Dict[str, Any]) -> None:
        """Queue one change of one event of `scale_set` (anything with `resource_id` and `location`)."""
        resource_id = (f"{scale_set.resource_id}/providers/microsoft.maintenance/scheduledevents/"
                       f"{fields['EventId']}")
        build = (scheduled_events.cloud_event if self.schema == scheduled_events.CLOUD_EVENT_SCHEMA
                 else scheduled_events.event_grid_event)
        event = build(resource_id, dict(fields), delivery_id=str(uuid.uuid4()),
                      event_time=datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
                      location=str(getattr(scale_set, "location", "") or self.location), event_type=self.event_type)
        with self._lock:
            twice = self._random.random() < self.duplicate_rate
        self._pending.put(event)
        if twice:
            self._pending.put(event)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything published so far was delivered (or failed); True when it was."""
        done = threading.Event()
        self._pending.put({"__flush__": done})
        return done.wait(timeout)

    def close(self) -> None:
        self._pending.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            event = self._pending.get()
            if event is None:
                return
            if "__flush__" in event:
                event["__flush__"].set()
                continue
            self._deliver(event)

    def _deliver(self, event: Dict[str, Any]) -> None:
        text = scheduled_events.queue_message_text(event, base64_encoded=self.base64)
        for attempt in range(3):
            try:
                self.writer.put(text)
            except OSError as exc:
                log.warning("Event Grid delivery to queue %s failed (attempt %d): %s", self.writer.queue,
                            attempt + 1, exc)
                continue
            with self._lock:
                self.delivered.append(event)
            return
        with self._lock:
            self.failed += 1
