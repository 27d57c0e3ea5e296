"""QueueSource on the real Azurite with the real SDKs: events in, duplicates dropped, malformed and
over-delivered messages moved to QUEUE-poison with the reason, one replica per event."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any, Iterator, List

import pytest
from helpers import poll_until
from queue_events import event_id, properties, resource_id
from shifted_clock import ShiftedClock

from vmss_terminate.central import eventgrid
from vmss_terminate.central.leases import EventLeases
from vmss_terminate.central.source import CentralEvent
from vmss_terminate.central.storage_queue import QueueSettings, QueueSource, poison_queue_name
from vmss_terminate_sim import azurite

pytestmark = pytest.mark.timeout(120)


class World:
    def __init__(self, endpoints: Any) -> None:
        from azure.storage.queue import QueueClient

        self.cs = endpoints.connection_string
        self.name = f"q{uuid.uuid4().hex[:20]}"
        self.queue = QueueClient.from_connection_string(self.cs, self.name)
        self.queue.create_queue()
        self.poison = QueueClient.from_connection_string(self.cs, poison_queue_name(self.name))
        self.container = f"l{uuid.uuid4().hex[:20]}"
        self.sources: List[QueueSource] = []

    def source(self, **settings: Any) -> QueueSource:
        made = QueueSource.from_connection_string(
            self.cs, self.name, QueueSettings(lease_container=self.container, lease_duration=15, visibility=30,
                                              metrics_interval=0, **settings))
        self.sources.append(made)
        return made

    def send(self, eid: str, *, status: str = "Scheduled", delivery: str = "", encode: bool = True,
             time: str = "2026-11-26T18:00:00Z") -> str:
        event = eventgrid.event_grid_schema(resource_id(eid), properties(eid, status=status),
                                            delivery_id=delivery or str(uuid.uuid4()), event_time=time)
        self.queue.send_message(eventgrid.encode_body(event, base64_encoded=encode))
        return str(event["id"])

    def depth(self) -> int:
        return int(self.queue.get_queue_properties().approximate_message_count)

    def poisoned(self) -> List[Any]:
        return [json.loads(m.content) for m in self.poison.peek_messages(max_messages=32)]


@pytest.fixture
def world(azurite_endpoints: Any) -> Iterator[World]:
    made = World(azurite_endpoints)
    yield made
    for source in made.sources:
        source.close()


def drain(source: QueueSource, want: int, settle: bool = True) -> List[CentralEvent]:
    """Poll until `want` events were handed over (settling each as the handler would)."""
    seen: List[CentralEvent] = []

    def step() -> bool:
        batch = source.poll()
        assert batch.complete, batch.problem
        for event in batch.events:
            if event.key + event.status not in {e.key + e.status for e in seen}:
                seen.append(event)
            if settle:
                source.settle(event)
        return len(seen) >= want

    assert poll_until(step, timeout=30)
    return seen


def test_an_event_is_handed_over_then_deleted_only_when_settled(world: World) -> None:
    eid = event_id()
    world.send(eid)
    source = world.source()
    batch = source.poll()
    assert [e.event_id for e in batch.events] == [eid] and batch.complete
    assert batch.events[0].scale_set.name == "web" and batch.events[0].pending
    assert source.poll().events == batch.events  # held: handed over again until settled
    source.settle(batch.events[0])
    assert source.poll().events == []
    assert poll_until(lambda: world.depth() == 0)
    assert source.metrics.settled == 1 and source.metrics.received == 1


def test_plain_json_and_cloudevents_bodies_are_read_too(world: World) -> None:
    a, b = event_id(), event_id()
    world.send(a, encode=False)
    world.queue.send_message(json.dumps(eventgrid.cloud_event(resource_id(b), properties(b), delivery_id="c",
                                                              event_time="t")))
    assert sorted(e.event_id for e in drain(world.source(), 2)) == sorted([a, b])


def test_a_duplicate_delivery_runs_nothing_twice(world: World) -> None:
    eid = event_id()
    delivery = world.send(eid)
    world.send(eid, delivery=delivery)  # Event Grid's double broadcast: same id
    world.send(eid)                     # same change, another id
    source = world.source()
    events = drain(source, 1)
    assert [e.event_id for e in events] == [eid]
    assert poll_until(lambda: (source.poll(), source.metrics.duplicates_dropped == 2)[1])
    assert poll_until(lambda: world.depth() == 0)


def test_a_duplicate_after_settling_is_dropped_by_another_replica_from_the_blob_record(world: World) -> None:
    eid = event_id()
    world.send(eid)
    drain(world.source(), 1)
    world.send(eid)  # a late duplicate reaches a fresh replica: the event's blob says it was settled
    other = world.source()
    assert poll_until(lambda: (other.poll().events == [], other.metrics.duplicates_dropped == 1)[1])
    assert poll_until(lambda: world.depth() == 0)


def test_a_later_change_of_the_event_is_handed_over_after_the_first_is_settled(world: World) -> None:
    eid = event_id()
    world.send(eid, time="2026-11-26T18:00:00Z")
    source = world.source()
    [first] = source.poll().events
    world.send(eid, status="Canceled", time="2026-11-26T18:01:00Z")
    assert poll_until(lambda: [e.status for e in source.poll().events] == ["Canceled"])
    source.settle(first)  # the Scheduled change (the handler acknowledged it earlier)
    [canceled] = source.poll().events
    assert canceled.status == "Canceled"
    source.settle(canceled)
    assert source.poll().events == [] and poll_until(lambda: world.depth() == 0)


@pytest.mark.parametrize("body, reason", [
    ("not an event", "neither JSON nor base64"),
    (base64.b64encode(b'{"id": "x", "eventType": "Microsoft.Storage.BlobCreated"}').decode(), "not a scheduled event"),
])
def test_a_malformed_message_moves_to_the_poison_queue_with_the_reason(world: World, body: str, reason: str) -> None:
    world.queue.send_message(body)
    good = event_id()
    world.send(good)
    source = world.source()
    assert [e.event_id for e in drain(source, 1)] == [good]  # the handler goes on
    [moved] = world.poisoned()
    assert reason in moved["reason"] and moved["content"] == body and moved["queue"] == world.name
    assert moved["dequeueCount"] == 1
    assert source.metrics.poison_moves == {"malformed": 1, "attempts": 0}
    assert 'vmss_terminate_queue_poison_moves_total{reason="malformed"} 1' in source.metrics.render()
    assert poll_until(lambda: world.depth() == 0)


def test_a_message_delivered_more_than_max_attempts_times_is_poisoned(world: World) -> None:
    eid = event_id()
    world.send(eid)
    for _ in range(2):  # two replicas that died before settling it
        [message] = list(world.queue.receive_messages(visibility_timeout=1))
        world.queue.update_message(message.id, message.pop_receipt, visibility_timeout=0)
    source = world.source(max_attempts=2)
    assert poll_until(lambda: (source.poll(), source.metrics.poison_moves["attempts"] == 1)[1])
    [moved] = world.poisoned()
    assert "delivered 3 times without being settled (--max-attempts 2)" in moved["reason"]
    assert poll_until(lambda: world.depth() == 0)


def test_while_one_replica_holds_an_event_the_other_leaves_it_alone(world: World) -> None:
    eid = event_id()
    world.send(eid)
    one, two = world.source(), world.source()
    [held] = one.poll().events
    world.send(eid, status="Started", time="2026-11-26T18:05:00Z")  # a later change reaches the other replica
    assert poll_until(lambda: (two.poll().events == [], two.metrics.busy_elsewhere == 1)[1])
    one.settle(held)
    assert one.poll().events == []


def test_metrics_report_depth_and_the_oldest_messages_age(world: World) -> None:
    for _ in range(3):
        world.send(event_id())
    source = world.source(batch=1)
    source.poll()
    assert source.metrics.depth is not None and source.metrics.depth >= 2
    assert source.metrics.oldest_age is not None and source.metrics.oldest_age >= 0
    text = source.metrics.render()
    assert "vmss_terminate_queue_depth " in text and "vmss_terminate_queue_oldest_message_age_seconds " in text
    assert world.name not in text  # no queue name, EventId or VM name as a label


def test_open_queue_source_reads_the_connection_string_from_the_named_variable_only(world: World) -> None:
    from vmss_terminate.central.storage_queue import open_queue_source
    from vmss_terminate.errors import UsageError

    url = f"{world.queue.url}"
    settings = QueueSettings(lease_container=world.container, lease_duration=15, metrics_interval=0)
    source = open_queue_source(url, "MY_QUEUE_CS", settings, environ={"MY_QUEUE_CS": world.cs})
    world.sources.append(source)
    eid = event_id()
    world.send(eid)
    assert [e.event_id for e in drain(source, 1)] == [eid]
    for env, name, message in [({}, "MY_QUEUE_CS", "is not set"), ({"X": "nope"}, "X", "not a Storage connection"),
                               ({}, "1BAD", "an environment variable's name")]:
        with pytest.raises(UsageError, match=message) as caught:
            open_queue_source(url, name, settings, environ=env)
        assert world.cs not in str(caught.value) and azurite.ACCOUNT_KEY not in str(caught.value)


@pytest.mark.parametrize("url, message", [
    ("https://acct.queue.core.windows.net/", "invalid --queue-url"),
    ("ftp://acct.queue.core.windows.net/q1q", "invalid --queue-url"),
    ("http://acct.queue.core.windows.net/q1q", "plain http only to loopback"),
    ("https://acct.queue.core.windows.net/Bad_Queue", "not a queue name"),
    ("http://127.0.0.1:10001/devstoreaccount1/q1q", "token goes over https only"),
    ("https://example.com/q1q", "is not https://ACCOUNT.queue"),
])
def test_bad_queue_urls_are_usage_errors_before_any_request(url: str, message: str) -> None:
    from vmss_terminate.central.storage_queue import open_queue_source
    from vmss_terminate.errors import UsageError

    with pytest.raises(UsageError, match=message):
        open_queue_source(url, None, credential=object())


@pytest.mark.parametrize("final", ["Canceled", "Completed", "Started"])
def test_a_scheduled_change_delivered_after_the_event_moved_on_is_never_handed_over(world: World, final: str) -> None:
    # Event Grid does not keep order: the Scheduled change may arrive after the event was
    # Canceled (or Started, Completed) and that change was settled. Handing it over would drain
    # and acknowledge an event that is no longer Scheduled.
    eid = event_id()
    world.send(eid, status=final, time="2026-11-26T18:05:00Z")
    source = world.source()
    [moved_on] = drain(source, 1)
    assert moved_on.status == final
    world.send(eid, time="2026-11-26T18:00:00Z")  # the Scheduled change, late
    other = world.source()  # any replica, after any restart: the event's blob decides
    for replica in (source, other):
        assert poll_until(lambda replica=replica: (replica.poll().events == [] and world.depth() == 0))
    assert source.poll().events == [] and other.poll().events == []


class _FailingRenewal:
    """The SDK's lease client, with its next renewal answered 503 (a transient Storage failure)."""

    def __init__(self, inner: Any, failures: int = 1) -> None:
        self.inner, self.failures = inner, failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def renew(self, **kwargs: Any) -> None:
        from azure.core.exceptions import HttpResponseError

        if self.failures:
            self.failures -= 1
            error = HttpResponseError(message="Server Busy")
            error.status_code = 503
            raise error
        self.inner.renew(**kwargs)


def test_a_transient_renewal_failure_keeps_the_event_held_and_is_retried(world: World) -> None:
    eid = event_id()
    world.send(eid)
    source = world.source()
    [event] = source.poll().events
    held = source._held[event.key]
    held.lease._lease = _FailingRenewal(held.lease._lease)
    source.keep_alive()  # 503: still held (the lease has most of its 15 s left), not counted lost
    assert source.holds(event) and source.metrics.lost == 0 and source.poll().events == [event]
    source.keep_alive()  # the retry renews it
    assert source.holds(event) and source.metrics.lost == 0




def test_renewals_failing_until_give_up_before_lose_the_event_while_no_other_replica_can_take_it(
        world: World) -> None:
    """Renewals answered 503 until fewer than `give_up_before` seconds of the lease are left: the
    event is given up then (the handler is told, `on_lost`, and stops its job) -- while the lease
    still keeps every other replica out, so the job's hook is gone before another can start it."""
    eid = event_id()
    world.send(eid)
    clock = ShiftedClock()
    settings = QueueSettings(lease_container=world.container, lease_duration=15, visibility=30, metrics_interval=0)
    source = QueueSource.from_connection_string(world.cs, world.name, settings, clock=clock)
    world.sources.append(source)
    lost: List[CentralEvent] = []
    source.on_lost.append(lost.append)
    [event] = source.poll().events
    held = source._held[event.key]
    held.lease._lease = _FailingRenewal(held.lease._lease, failures=10)
    source.keep_alive()  # 503 with most of the lease left: held, tried again in a second
    assert source.holds(event) and lost == [] and source._next_round() == 1.0
    clock.offset += 15 - settings.give_up_before  # still no renewal, and only give_up_before s are left
    source.keep_alive()
    assert lost == [event] and not source.holds(event) and source.metrics.lost == 1
    other = EventLeases.from_connection_string(world.cs, world.container, duration=15)
    assert other.acquire(eid) is None  # the lease at Azure still keeps another replica out


def test_a_lease_taken_over_is_lost_at_the_next_renewal(world: World) -> None:
    from azure.storage.blob import BlobLeaseClient, ContainerClient

    eid = event_id()
    world.send(eid)
    source = world.source()
    [event] = source.poll().events
    blob = ContainerClient.from_connection_string(world.cs, world.container).get_blob_client(eid.lower())
    BlobLeaseClient(blob).break_lease(lease_break_period=0)  # another replica broke and took it
    BlobLeaseClient(blob).acquire(lease_duration=15)
    source.keep_alive()
    assert not source.holds(event) and source.metrics.lost == 1 and source.poll().events == []
