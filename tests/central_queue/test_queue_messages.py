"""Queue messages -> scheduled events: both schemas, both event-type strings, both encodings, and a
one-line reason for everything that is not a scheduled event."""

from __future__ import annotations

import base64
import json
from typing import Any, Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queue_events import LEARN_EXAMPLE, SUB, event_id, properties, resource_id

from vmss_terminate.central import eventgrid as messages
from vmss_terminate.central.eventgrid import Malformed, parse_message


def b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode("utf-8")).decode("ascii")


def test_learns_example_payload_base64_encoded_as_event_grid_delivers_it() -> None:
    [note] = parse_message(b64(LEARN_EXAMPLE))
    assert note.delivery_id == "3da1b9aa-5204-4335-8c33-c54e315dcffe"
    assert note.event_id == "3da1b9aa-5204-4335-8c33-c54e315dcffe"
    assert note.event.event_type == "Freeze" and note.status == "Started"
    assert note.event.resources == ("myvmss_1", "myvmss_2")
    assert note.scale_set.id == f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/" \
                                "virtualMachineScaleSets/myvmss"
    assert note.schema == "EventGridSchema" and note.event.source == "queue"
    assert note.not_before_raw == "Mon, 19 Sep 2025 18:29:47 GMT" and note.event.not_before is not None


def test_the_writer_produces_learns_shape() -> None:
    props = LEARN_EXAMPLE["data"]["resourceInfo"]["properties"]  # type: ignore[index]
    written = messages.event_grid_schema(LEARN_EXAMPLE["subject"], props, delivery_id=LEARN_EXAMPLE["id"],
                                         event_time=LEARN_EXAMPLE["eventTime"])
    expected = json.loads(json.dumps(LEARN_EXAMPLE))
    expected["data"]["resourceInfo"]["type"] = "microsoft.maintenance/scheduledevents"
    assert written == expected


@pytest.mark.parametrize("encode", [b64, json.dumps], ids=["base64", "plain"])
@pytest.mark.parametrize("event_type", messages.EVENT_TYPES + (messages.WRITE.upper(),))
@pytest.mark.parametrize("writer", [messages.event_grid_schema, messages.cloud_event], ids=["eventgrid", "cloudevents"])
def test_both_schemas_both_event_types_both_encodings(encode: Any, event_type: str, writer: Any) -> None:
    eid = event_id()
    event = writer(resource_id(eid), properties(eid), delivery_id="d-1", event_time="2026-11-26T18:00:00Z",
                   event_type=event_type)
    [note] = parse_message(encode(event))
    assert note.event_id == eid and note.delivery_id == "d-1" and note.event_type == event_type
    assert note.event.event_type == "Terminate" and note.event.not_before is not None
    assert note.schema == ("CloudEventSchemaV1_0" if writer is messages.cloud_event else "EventGridSchema")


def test_encode_body_round_trips_and_base64_is_the_default() -> None:
    eid = event_id()
    event = messages.event_grid_schema(resource_id(eid), properties(eid), delivery_id="x", event_time="t")
    body = messages.encode_body(event)
    assert json.loads(base64.b64decode(body)) == event
    assert parse_message(body)[0].event_id == eid
    assert parse_message(messages.encode_body(event, base64_encoded=False))[0].event_id == eid


def test_an_array_of_events_is_read_as_several() -> None:
    a, b = event_id(), event_id()
    events = [messages.event_grid_schema(resource_id(e), properties(e), delivery_id=e, event_time="t") for e in (a, b)]
    assert [n.event_id for n in parse_message(json.dumps(events))] == [a, b]


def test_same_change_delivered_twice_has_one_dedup_key_and_a_new_status_another() -> None:
    eid = event_id()
    first = parse_message(b64(messages.event_grid_schema(resource_id(eid), properties(eid), delivery_id="1",
                                                         event_time="t")))[0]
    again = parse_message(b64(messages.event_grid_schema(resource_id(eid), properties(eid), delivery_id="2",
                                                         event_time="t")))[0]
    later = parse_message(b64(messages.event_grid_schema(resource_id(eid), properties(eid, status="Canceled"),
                                                         delivery_id="3", event_time="t")))[0]
    assert first.dedup_key == again.dedup_key != later.dedup_key


def _good() -> Dict[str, Any]:
    eid = event_id()
    return messages.event_grid_schema(resource_id(eid), properties(eid), delivery_id="d", event_time="t")


def _mutate(path: str, value: Any) -> Dict[str, Any]:
    event = _good()
    target = event
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[key]
    if value is KeyError:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return event


@pytest.mark.parametrize("body, reason", [
    ("", "empty message"),
    ("   ", "empty message"),
    ("not base64 !!", "neither JSON nor base64"),
    (base64.b64encode(b"\xff\xfe").decode(), "UTF-8"),
    (base64.b64encode(b"hello").decode(), "not JSON"),
    ("{", "not JSON"),
    ("[]", "empty JSON array"),
    ("42", "neither JSON nor base64"),
    (json.dumps([42]), "not a JSON object"),
    (json.dumps(_mutate("id", KeyError)), "no id"),
    (json.dumps(_mutate("eventType", "Microsoft.Storage.BlobCreated")), "not a scheduled event"),
    (json.dumps(_mutate("data", "x")), "no data object"),
    (json.dumps(_mutate("data.resourceInfo", KeyError)), "resourceInfo.properties"),
    (json.dumps(_mutate("data.resourceInfo.properties.EventId", KeyError)), "EventId"),
    (json.dumps(_mutate("data.resourceInfo.properties.Resources", "web_1")), "Resources"),
    (json.dumps(_mutate("data.resourceInfo.properties.NotBefore", "tomorrow")), "RFC 1123"),
    (json.dumps(_mutate("data.resourceInfo.id", resource_id("x").replace("virtualMachineScaleSets/web",
                                                                          "virtualMachines/vm1"))),
     "not a scheduled event id of a scale set"),
    (json.dumps(_mutate("data.resourceInfo.id", "/subscriptions/x/resourceGroups/g")), "not a scheduled event id"),
    (json.dumps(_mutate("data.resourceInfo.properties.EventId", "11111111-1111-1111-1111-111111111111")),
     "but EventId is"),
    (json.dumps(_mutate("subject", resource_id("22222222-2222-2222-2222-222222222222"))), "different scheduled"),
    (json.dumps({**_good(), "specversion": "0.3"}), "specversion"),
])
def test_what_is_not_a_scheduled_event_is_malformed_with_a_reason(body: str, reason: str) -> None:
    with pytest.raises(Malformed) as caught:
        parse_message(body)
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                              lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                          max_size=4),
                              max_leaves=20).map(json.dumps)))
def test_any_body_is_read_or_refused_with_malformed_never_another_error(body: str) -> None:
    try:
        parse_message(body)
    except Malformed:
        pass
