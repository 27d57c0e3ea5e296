"""The central handler reading the queue: events published by the ARM emulator's Event Grid reach a
real Azurite queue, `central.run.build(source=open_queue_source(...))` acts on them and acknowledges
each once through the Maintenance RP (the ARM emulator), and the queue is left empty -- messages
deleted only after the acknowledgement or once the event is no longer actionable."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from helpers import poll_until, serve_arm_state

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import Central, build
from vmss_terminate.central.storage_queue import QueueSettings, open_queue_source
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.imds.events import PlacementGroup
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

pytest.importorskip("azure.mgmt.resourcegraph")

SUB = "33333333-0000-0000-0000-000000000001"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}


class World:
    def __init__(self, endpoints: Any) -> None:
        self.state = ArmState(clock=SYSTEM_CLOCK)
        ss = self.state.add_scale_set(SUB, "rg", "web", capacity=3, extra_properties={"scheduledEventsPolicy": POLICY})
        self.group = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=False)
        self.state.maintenance.attach(ss, self.group)
        other = self.state.add_scale_set(SUB, "rg", "api", capacity=2, extra_properties={"scheduledEventsPolicy": POLICY})
        self.other = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=False)
        self.state.maintenance.attach(other, self.other)
        self.queue_name = f"q{uuid.uuid4().hex[:20]}"
        self.cs = endpoints.connection_string
        writer = StorageQueueWriter(self.cs, self.queue_name)
        writer.create_queue()
        self.delivery = EventGridDelivery(writer, duplicate_rate=0.5, seed=7).attach(self.state.maintenance)
        self.url = f"{endpoints.queue}/{self.queue_name}"
        self.container = f"l{uuid.uuid4().hex[:20]}"

    def depth(self) -> int:
        from azure.storage.queue import QueueClient

        client = QueueClient.from_connection_string(self.cs, self.queue_name)
        return int(client.get_queue_properties().approximate_message_count)


@pytest.fixture
def world(azurite_endpoints: Any) -> Iterator[World]:
    made = World(azurite_endpoints)
    yield made
    made.delivery.close()


@pytest.fixture
def arm(shared_arm: ArmServers, world: World, monkeypatch: pytest.MonkeyPatch) -> ArmServers:
    return serve_arm_state(shared_arm, world.state, monkeypatch)


def _central(world: World, arm: ArmServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> Central:
    monkeypatch.setenv("QUEUE_CS", world.cs)
    source = open_queue_source(world.url, "QUEUE_CS", QueueSettings(lease_container=world.container,
                                                                    lease_duration=15, metrics_interval=0))
    return build(Scope.build(subscriptions=[SUB]), HandlerConfig(poll_interval=0.05, **config),
                 connection=Connection(arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                 state_file=str(tmp_path / "state.json"), source=source)


def test_events_from_the_queue_are_acknowledged_once_and_their_messages_deleted(
        world: World, arm: ArmServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terminate = world.group.add_event("Terminate", ["web_1"], not_before=SYSTEM_CLOCK.now() + 600)
    freeze = world.group.add_event("Freeze", ["web_2"], not_before=SYSTEM_CLOCK.now() + 600)
    assert world.delivery.flush()
    central = _central(world, arm, tmp_path, monkeypatch)
    try:
        def acknowledged() -> bool:
            central.handler.poll_once(wait=True)
            return any(a.event_id == terminate for a in world.state.maintenance.acknowledgements)

        assert poll_until(acknowledged, timeout=60)
        # the acknowledged Terminate and the Freeze this handler does not act on are settled: queue empty
        assert poll_until(lambda: (central.handler.poll_once(wait=True), world.depth() == 0)[1], timeout=60)
        acks = world.state.maintenance.acknowledgements
        assert [(a.event_id, a.accepted) for a in acks] == [(terminate, True)]
        assert freeze not in {a.event_id for a in acks}
        source = central.handler.source
        assert source.metrics.settled >= 2  # type: ignore[attr-defined]
    finally:
        central.close()
        central.handler.source.close()


def test_a_lease_lost_mid_hook_kills_the_hook_and_never_acknowledges(
        world: World, arm: ArmServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event's lease is broken while a hook runs (its renewal is refused; the break period keeps
    every other replica out for 15 s): the keeper's next round gives the event up, the pipeline
    kills the running hook's process group before another replica can take the lease, and the event
    is never acknowledged here (issue 26: the hook used to run on beside the next holder's)."""
    import os
    import sys

    from azure.storage.blob import BlobLeaseClient, ContainerClient

    from vmss_terminate.central.leases import EventLeases
    from vmss_terminate.central.metrics import CentralMetrics

    eid = world.group.add_event("Terminate", ["web_1"], not_before=SYSTEM_CLOCK.now() + 600)
    assert world.delivery.flush()
    started, go = tmp_path / "started", tmp_path / "go"
    script = tmp_path / "hold.py"
    script.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
                      "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n")
    monkeypatch.setenv("QUEUE_CS", world.cs)
    settings = QueueSettings(lease_container=world.container, lease_duration=15, metrics_interval=0)
    source = open_queue_source(world.url, "QUEUE_CS", settings)
    metrics = CentralMetrics()
    central = build(Scope.build(subscriptions=[SUB]),
                    HandlerConfig(poll_interval=0.05, hooks=(f"{sys.executable} {script} {started} {go}",)),
                    connection=Connection(arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                    state_file=str(tmp_path / "state.json"), source=source, observe=metrics.observe)
    try:
        assert poll_until(lambda: any(e.event_id == eid for e in central.handler.poll_once()), timeout=60)
        assert poll_until(lambda: started.exists() and started.read_text() != "", timeout=60)
        pid = int(started.read_text())
        event = next(e for e in central.handler.last_batch.events if e.event_id == eid)  # type: ignore[union-attr]
        blob = ContainerClient.from_connection_string(world.cs, world.container).get_blob_client(eid.lower())
        BlobLeaseClient(blob).break_lease(lease_break_period=15)  # no other replica may take it for 15 s
        source.keep_alive()  # the keeper's round: the renewal is refused, the event given up, its job stopped
        central.handler.join(timeout=30)
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        assert EventLeases(ContainerClient.from_connection_string(world.cs, world.container)).acquire(eid) is None
        assert not go.exists() and world.state.maintenance.acknowledgements == []
        assert not source.holds(event) and source.metrics.lost == 1
        assert "vmss_terminate_central_events_lease_lost_total{type=\"Terminate\"} 1" in metrics.text()
        central.handler.poll_once(wait=True)  # the next poll starts nothing for it and acknowledges nothing
        assert world.state.maintenance.acknowledgements == []
    finally:
        go.touch()
        central.close()
        source.close()
