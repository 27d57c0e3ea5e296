"""The ARM emulator plays Event Grid: each published change of a scale set's scheduled event reaches
a real Azurite queue as an event subscription would deliver it (one event per message, base64 JSON,
Event Grid or CloudEvents schema, duplicates with the same id as a fault), and the product reads it."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any, List

import pytest

from vmss_terminate.central.eventgrid import parse_message
from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.arm.app import ArmState
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.imds.events import PlacementGroup
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

SUB = "00000000-0000-0000-0000-000000000000"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}


def _setup(endpoints: Any, **options: Any) -> Any:
    from azure.storage.queue import QueueClient

    clock = ManualClock()
    state = ArmState(clock=clock)
    ss = state.add_scale_set(SUB, "rg", "web", capacity=3)
    ss.extra_properties["scheduledEventsPolicy"] = POLICY
    group = PlacementGroup(clock=clock, auto_start=False)
    state.maintenance.attach(ss, group)
    name = f"q{uuid.uuid4().hex[:20]}"
    writer = StorageQueueWriter(endpoints.connection_string, name)
    writer.create_queue()
    delivery = EventGridDelivery(writer, **options).attach(state.maintenance)
    return clock, ss, group, delivery, QueueClient.from_connection_string(endpoints.connection_string, name)


def _bodies(queue: Any) -> List[str]:
    return [m.content for m in queue.receive_messages(max_messages=32, messages_per_page=32)]


def test_every_change_of_a_published_event_is_delivered_base64_in_the_event_grid_schema(azurite_endpoints: Any) -> None:
    clock, ss, group, delivery, queue = _setup(azurite_endpoints)
    eid = group.add_event("Terminate", ["web_1"], not_before=clock.now() + 300)
    group.start_event(eid)
    group.remove_event(eid)
    other = group.add_event("Terminate", ["web_2"], not_before=clock.now() + 300)
    group.remove_event(other)
    assert delivery.flush()
    bodies = _bodies(queue)
    assert all(json.loads(base64.b64decode(b))["eventType"].endswith("ScheduledEventEmitted") for b in bodies)
    notes = [parse_message(b)[0] for b in bodies]
    assert [(n.event_id, n.status) for n in notes] == [(eid, "Scheduled"), (eid, "Started"), (eid, "Completed"),
                                                       (other, "Scheduled"), (other, "Canceled")]
    assert all(n.scale_set.id.lower() == ss.resource_id.lower() for n in notes)
    assert len({n.delivery_id for n in notes}) == 5 and notes[0].schema == "EventGridSchema"
    delivery.close()


def test_a_set_that_does_not_publish_sends_nothing(azurite_endpoints: Any) -> None:
    clock, ss, group, delivery, queue = _setup(azurite_endpoints)
    ss.extra_properties["scheduledEventsPolicy"] = {}
    group.add_event("Terminate", ["web_1"], not_before=clock.now() + 300)
    assert delivery.flush() and _bodies(queue) == [] and delivery.delivered == []
    delivery.close()


def test_cloudevents_plain_json_and_duplicates_with_the_same_id(azurite_endpoints: Any) -> None:
    clock, ss, group, delivery, queue = _setup(azurite_endpoints, schema="CloudEventSchemaV1_0", base64=False,
                                               duplicate_rate=1.0, seed=1)
    group.add_event("Terminate", ["web_1"], not_before=clock.now() + 300)
    assert delivery.flush()
    bodies = _bodies(queue)
    assert len(bodies) == 2 and bodies[0] == bodies[1] and json.loads(bodies[0])["specversion"] == "1.0"
    assert parse_message(bodies[0])[0].schema == "CloudEventSchemaV1_0"
    delivery.close()


def test_bad_options_are_refused(azurite_endpoints: Any) -> None:
    writer = StorageQueueWriter(azurite_endpoints.connection_string, "qqq")
    with pytest.raises(ValueError, match="eventDeliverySchema"):
        EventGridDelivery(writer, schema="Custom")
    with pytest.raises(ValueError, match="0..1"):
        EventGridDelivery(writer, duplicate_rate=2)
