"""One acknowledgement per event across replicas, whatever a replica's speed: two QueueSources and
two CentralHandlers in process on the real Azurite, replica A's lease made to lapse at Azure at the
worst moments (its clock pushed past the lease's expiry: A was starved that long; the lease broken:
Azure let it go), and a duplicate delivery of the event reaching replica B meanwhile.

The acknowledgement is recorded in the event's lease blob, under the lease, before the POST
(`QueueSource.acknowledging`): a replica taking the lease over reads it and never sends another,
and a replica whose lease is no longer the blob's cannot write it (412) and sends nothing."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest
from queue_events import event_id, properties, resource_id
from shifted_clock import ShiftedClock

from vmss_terminate.central import eventgrid
from vmss_terminate.central.graph import ScaleSetInfo
from vmss_terminate.central.handler import CentralHandler
from vmss_terminate.central.leases import EventLeases
from vmss_terminate.central.maintenance import APPROVED, AckResult
from vmss_terminate.central.source import CentralEvent, ScaleSetRef
from vmss_terminate.central.storage_queue import QueueSettings, QueueSource
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate_sim import azurite

pytestmark = pytest.mark.timeout(120)




class World:
    def __init__(self, endpoints: Any) -> None:
        from azure.storage.queue import QueueClient

        self.cs = endpoints.connection_string
        self.name = f"q{uuid.uuid4().hex[:20]}"
        self.queue = QueueClient.from_connection_string(self.cs, self.name)
        self.queue.create_queue()
        self.container = f"l{uuid.uuid4().hex[:20]}"
        self.sources: List[QueueSource] = []
        self.sent: List[Tuple[str, str]] = []  # (replica, EventId): every acknowledge POST

    def source(self, clock: ShiftedClock, connection_string: str = "") -> QueueSource:
        made = QueueSource.from_connection_string(
            connection_string or self.cs, self.name, QueueSettings(lease_container=self.container, lease_duration=15, visibility=30,
                                              metrics_interval=0), clock=clock)
        self.sources.append(made)
        return made

    def send(self, eid: str, **changed: Any) -> None:
        """One delivery of the event's Scheduled change (a new Event Grid id: a duplicate delivery)."""
        event = eventgrid.event_grid_schema(resource_id(eid), properties(eid, **changed),
                                            delivery_id=str(uuid.uuid4()), event_time="2026-11-26T18:00:00Z")
        self.queue.send_message(eventgrid.encode_body(event))

    def break_lease(self, eid: str) -> None:
        """The event's lease lapses at Azure (broken at once: free for the next replica's acquire)."""
        from azure.storage.blob import BlobLeaseClient, ContainerClient

        blob = ContainerClient.from_connection_string(self.cs, self.container).get_blob_client(eid.lower())
        BlobLeaseClient(blob).break_lease(lease_break_period=0)

    def handler(self, name: str, source: QueueSource, during_post: Any = None) -> CentralHandler:
        def lookup(refs: Sequence[ScaleSetRef]) -> Dict[str, ScaleSetInfo]:
            return {ref.key: ScaleSetInfo(ref) for ref in refs}

        def acknowledge(ref: ScaleSetRef, ids: Sequence[str]) -> List[AckResult]:
            self.sent.extend((name, eid) for eid in ids)  # the POST went out
            if during_post is not None:
                during_post()
            return [AckResult(ref, eid, True, 200, APPROVED) for eid in ids]

        return CentralHandler(source, lookup, acknowledge)


@pytest.fixture
def world(azurite_endpoints: Any) -> Iterator[World]:
    made = World(azurite_endpoints)
    yield made
    for source in made.sources:
        source.close()


def test_a_replica_starved_between_its_post_and_settling_is_not_acknowledged_again_by_another(
        world: World) -> None:
    """(a) A sends the acknowledgement, then is starved past its lease's expiry before it deletes
    the message and records the change: its keeper gives the event up ("its expiry passed without a
    renewal"), the lease lapses at Azure, and B takes the lease with a duplicate delivery of the
    same Scheduled change. B must find that the event was acknowledged (the message it holds is
    only a snapshot) and send nothing. Before the acknowledgement was recorded before the POST,
    B acknowledged it a second time."""
    eid = event_id()
    world.send(eid)
    clock_a = ShiftedClock()
    source_a = world.source(clock_a)
    lost: List[CentralEvent] = []
    source_a.on_lost.append(lost.append)

    def starved_after_the_post() -> None:
        clock_a.offset += source_a.settings.lease_duration + 1
        world.break_lease(eid)  # its expiry passed at Azure too: free for the next acquire
        world.send(eid)  # Event Grid delivers the same change again (at least once)
        source_a.keep_alive()  # A's keeper runs first when A gets a core again

    handler_a = world.handler("A", source_a, during_post=starved_after_the_post)
    handler_a.poll_once(wait=True)
    assert world.sent == [("A", eid)]
    assert [e.event_id for e in lost] == [eid] and source_a.metrics.lost == 1

    source_b = world.source(ShiftedClock())
    handler_b = world.handler("B", source_b)
    handler_b.poll_once(wait=True)
    assert world.sent == [("A", eid)], "the event was acknowledged twice"
    assert source_b.metrics.duplicates_dropped == 1 and source_b.poll().events == []
    record = EventLeases.from_connection_string(world.cs, world.container, duration=15).record(eid)
    assert record.ack["change"].startswith("Scheduled|")


def test_a_replica_whose_lease_lapsed_before_its_post_sends_nothing(world: World) -> None:
    """(b) A's own clock says it still holds the lease, but the lease lapsed at Azure and B took the
    event (a duplicate delivery): A's record of the acknowledgement is refused (the lease is B's),
    so A sends no POST, and B acknowledges the event, once. Before, A's check of its lease was its
    own clock only, and both sent one."""
    eid = event_id()
    world.send(eid)
    source_a = world.source(ShiftedClock())
    source_a._stop.set()  # no keeper thread: its renewal would find the loss first, and the fence go untested
    [event_a] = source_a.poll().events
    world.break_lease(eid)
    world.send(eid)
    source_b = world.source(ShiftedClock())
    assert [e.event_id for e in source_b.poll().events] == [eid]
    assert source_a.holds(event_a)  # nothing told A yet: its clock says the lease has time left

    world.handler("A", source_a).poll_once(wait=True)
    assert world.sent == []
    world.handler("B", source_b).poll_once(wait=True)
    assert world.sent == [("B", eid)]


def test_the_record_is_kept_for_a_retry_under_the_same_lease_and_taken_back_when_azure_refuses(
        world: World) -> None:
    """The same holder may try again (its POST failed); a refused acknowledgement released nothing,
    so its record is taken back and the next holder of the lease may acknowledge the event."""
    eid = event_id()
    world.send(eid)
    source = world.source(ShiftedClock())
    [event] = source.poll().events
    leases = EventLeases.from_connection_string(world.cs, world.container, duration=15)
    assert source.acknowledging(event) is None and leases.record(eid).ack["lease"]
    assert source.acknowledging(event) is None
    source.unacknowledging(event)
    assert leases.record(eid).ack == {}


def test_a_replica_resuming_after_the_other_took_its_lease_gives_the_event_up_when_settling(world: World) -> None:
    """A is starved after its POST for so long that B took the lease (a duplicate delivery) before
    A's keeper ran: A's settle is refused (the lease is B's) and gives the event up -- no error
    escapes into A's job or poll loop, its next polls leave the event alone -- and B, finding the
    acknowledgement recorded, drops its delivery: one acknowledgement."""
    eid = event_id()
    world.send(eid)
    source_a = world.source(ShiftedClock())
    lost: List[CentralEvent] = []
    source_a.on_lost.append(lost.append)
    source_b = world.source(ShiftedClock())

    def starved_until_b_took_the_lease() -> None:
        world.break_lease(eid)
        world.send(eid)
        # B took the lease, found the acknowledgement recorded, dropped the delivery and let the lease
        # go: the lease is no longer A's, so A's record of the settled change is refused
        assert source_b.poll().events == []
        assert source_b.metrics.duplicates_dropped == 1

    handler_a = world.handler("A", source_a, during_post=starved_until_b_took_the_lease)
    handler_a.poll_once(wait=True)
    assert [e.event_id for e in lost] == [eid] and source_a.metrics.lost == 1
    assert handler_a.poll_once(wait=True) == [] and source_a.poll().events == []
    world.handler("B", source_b).poll_once(wait=True)
    assert world.sent == [("A", eid)]


def test_an_event_widened_while_its_acknowledgement_is_recorded_is_not_acknowledged(
        world: World, azurite_endpoints: Any) -> None:
    """Recording the acknowledgement waits for the event's other Storage calls (seconds): a poll
    meanwhile reads the event listing web_2 too (Azure widened it: a new NotBefore). The POST would
    release web_2, whose steps never ran: the VMs are compared again after the record is written,
    the acknowledgement is withheld and its record taken back. Before, the comparison ran only
    before the record, and web_2 was released."""
    from test_lease_give_up import BlobFaults

    eid = event_id()
    world.send(eid)
    proxy = BlobFaults(azurite_endpoints.blob)
    try:
        source = world.source(ShiftedClock(), azurite.Endpoints(blob=proxy.url, queue=azurite_endpoints.queue)
                              .connection_string)
        source._stop.set()  # no keeper thread: only the handler's own requests reach the blob
        handler = world.handler("A", source)
        said: List[Decision] = []
        handler.bus.subscribe(said.append)
        widened: List[str] = []

        def poll_while_the_record_is_written(method: str, path: str, headers: Any) -> None:
            if method == "PUT" and headers.get("x-ms-lease-id") and not widened:
                widened.append(path)
                world.send(eid, resources=["web_1", "web_2"], not_before=4102444900.0)
                handler.poll_once()  # the poll loop, running beside the job

        proxy.before = poll_while_the_record_is_written
        handler.poll_once(wait=True)
        assert widened, "the acknowledgement was never recorded"
        assert world.sent == [], "web_2 was released before its steps ran"
        assert [d.message for d in said if d.kind == D.APPROVAL_WITHHELD] == [
            f"not acknowledging {eid} yet: it now lists web_1, web_2 (checked: web_1); judged again as read next poll"]
        assert EventLeases.from_connection_string(world.cs, world.container, duration=15).record(eid).ack == {}
    finally:
        proxy.close()


def test_a_message_delete_that_fails_is_retried_next_poll_and_ends_nothing(world: World, azurite_endpoints: Any,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Deleting a settled message fails at Storage (the proxy in front of the queue refuses every
    DELETE; a status the SDK does not retry keeps the test fast -- a 5xx is the same error once the
    SDK's retries are spent): the poll that settles the event logs it and returns (before, the SDK's
    error escaped poll_once, whose loop catches only the product's AzureError, and `central run`
    ended), the change stays held, and the next poll deletes it."""
    from test_lease_give_up import BlobFaults

    eid = event_id()
    world.send(eid, event_type="Freeze")  # not a type this handler acts on: the poll settles it at once
    proxy = BlobFaults(azurite_endpoints.queue)
    try:
        source = world.source(ShiftedClock(), azurite.Endpoints(blob=azurite_endpoints.blob, queue=proxy.url)
                              .connection_string)
        source._stop.set()
        handler = world.handler("A", source)
        proxy.fault, proxy.faults = "403", lambda method, headers: method == "DELETE"
        assert handler.poll_once(wait=True) == []
        assert proxy.faulted == 1 and source.metrics.settled == 0 and source.metrics.held == 1
        assert "retried next poll" in caplog.text
        proxy.fault = None
        assert handler.poll_once(wait=True) == []
        assert source.metrics.settled == 1 and source.metrics.held == 0 and world.sent == []
        assert world.queue.peek_messages() == []
    finally:
        proxy.close()


class Watched(ShiftedClock):
    """ShiftedClock whose next reading tells the test (set `asked` first): `holds()` was just asked."""

    asked: Any = None

    def monotonic(self) -> float:
        if self.asked is not None:
            self.asked.set()
        return super().monotonic()


def test_a_replica_that_gives_the_event_up_while_waiting_to_record_the_acknowledgement_sends_nothing(
        world: World) -> None:
    """acknowledging asks `holds()`, then waits for the event's other Storage calls (`io`, seconds):
    the event is given up meanwhile (its give-up moment passed). It asks again once it has `io`,
    and records nothing (the lease is still this replica's at Azure: the write would succeed).
    Before, it wrote the record and the handler sent the POST for an event it had given up."""
    eid = event_id()
    world.send(eid)
    clock = Watched()
    source = world.source(clock)
    source._stop.set()  # no keeper thread: the test decides when the event is given up
    [event] = source.poll().events
    [held] = source._held.values()
    answer: List[Any] = []
    with held.io:  # a slow Storage call of the event's is under way
        clock.asked = threading.Event()
        recording = threading.Thread(target=lambda: answer.append(source.acknowledging(event)))
        recording.start()
        assert clock.asked.wait(30)  # it asked holds() (True) and now waits for io
        clock.asked = None
        clock.offset += source.settings.lease_duration  # its give-up moment passes meanwhile
    recording.join(timeout=30)
    assert answer == ["this replica no longer holds the event's lease"]
    assert EventLeases.from_connection_string(world.cs, world.container, duration=15).record(eid).ack == {}
