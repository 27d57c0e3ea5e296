"""The Event Grid -> Storage queue source on the real Azurite (loopback only).

1. Latency: an event added to a scale set's placement group in the ARM emulator is delivered by the
   emulator's Event Grid (`EventGridDelivery`, base64 Event Grid schema) to an Azurite queue; one
   replica (`QueueSource`, polled as the handler polls it: at once after a batch, `--idle` seconds
   after an empty one) hands it over and the Maintenance RP acknowledge POST is sent to the ARM
   emulator, no hook. Measured: message enqueued (Put Message answered) -> acknowledge POST sent.
2. Throughput: N messages already in the queue, one replica pinned to one core
   (`os.sched_setaffinity`), acknowledging each (POST to the ARM emulator) and settling it: events
   per second, and Storage requests per event. Azurite (node) runs on the other core.

usage: python benchmarks/queue_source.py [--events 50] [--throughput 300] [--idle 0.1]
Needs Azurite installed (python -m vmss_terminate_sim.azurite install).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Dict, List

import requests

from vmss_terminate.central.storage_queue import QueueSettings, QueueSource
from vmss_terminate.clock import ManualClock
from vmss_terminate_sim import azurite
from vmss_terminate_sim.emulator.arm.app import ArmState, start_arm
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.imds.events import PlacementGroup
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

SUB = "00000000-0000-0000-0000-000000000000"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}


class TimedWriter(StorageQueueWriter):
    """Records when each message's Put Message was answered (by EventId)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.enqueued: Dict[str, float] = {}

    def put(self, text: str) -> None:
        super().put(text)
        import base64
        import json

        event = json.loads(base64.b64decode(text))
        self.enqueued.setdefault(event["data"]["resourceInfo"]["properties"]["EventId"], time.monotonic())


def ack_url(arm: Any, event: Any) -> str:
    return (f"{arm.arm_url}{event.scale_set.id}/providers/Microsoft.Maintenance/scheduledevents/"
            f"{event.event_id}/acknowledge")


def run_replica(source: QueueSource, arm: Any, token: str, want: int, idle: float,
                sent: Dict[str, float]) -> None:
    http = requests.Session()
    http.trust_env = False
    gate = threading.Event()
    while len(sent) < want:
        batch = source.poll()
        for event in batch.events:
            if event.pending and event.event_id not in sent:
                sent[event.event_id] = time.monotonic()
                answer = http.post(ack_url(arm, event), params={"api-version": "2023-10-01-preview"},
                                   headers={"Authorization": f"Bearer {token}"}, timeout=10)
                assert answer.status_code in (200, 404), answer.text
            source.settle(event)
        if not batch.events:
            gate.wait(idle)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--throughput", type=int, default=300)
    parser.add_argument("--idle", type=float, default=0.1)
    args = parser.parse_args()
    if not azurite.is_installed():
        print(azurite.missing_azurite_message(), file=sys.stderr)
        return 1
    server = azurite.start()
    clock = ManualClock()
    state = ArmState(clock=clock)
    ss = state.add_scale_set(SUB, "rg", "web", capacity=3)
    ss.extra_properties["scheduledEventsPolicy"] = POLICY
    group = PlacementGroup(clock=clock, auto_start=False)
    state.maintenance.attach(ss, group)
    try:
        with start_arm(state) as arm:
            token = arm.tokens.issue()
            cs = server.endpoints.connection_string
            # 1. latency
            name = f"lat{uuid.uuid4().hex[:12]}"
            writer = TimedWriter(cs, name)
            writer.create_queue()
            delivery = EventGridDelivery(writer).attach(state.maintenance)
            source = QueueSource.from_connection_string(cs, name, QueueSettings(lease_duration=15,
                                                                                metrics_interval=60))
            sent: Dict[str, float] = {}
            replica = threading.Thread(target=run_replica, args=(source, arm, token, args.events, args.idle, sent))
            replica.start()
            gate = threading.Event()
            for _ in range(args.events):
                group.add_event("Terminate", ["web_1"], not_before=clock.now() + 600)
                gate.wait(0.05 + (hash(uuid.uuid4()) % 100) / 1000)  # random phases of the poll cycle
            replica.join(timeout=120)
            delivery.close()
            source.close()
            lat = sorted(sent[eid] - writer.enqueued[eid] for eid in sent if eid in writer.enqueued)
            print(f"latency, message enqueued -> acknowledge sent (no hook, idle poll {args.idle} s), "
                  f"{len(lat)} events: median {statistics.median(lat) * 1000:.1f} ms, "
                  f"p90 {lat[int(len(lat) * 0.9) - 1] * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms")
            # 2. throughput on one core
            name = f"thr{uuid.uuid4().hex[:12]}"
            filler = StorageQueueWriter(cs, name)
            filler.create_queue()
            from vmss_terminate import scheduled_events

            for _ in range(args.throughput):
                eid = str(uuid.uuid4())
                rid = f"{ss.resource_id}/providers/microsoft.maintenance/scheduledevents/{eid}"
                props = {"EventId": eid, "EventType": "Terminate", "ResourceType": "VirtualMachine",
                         "Resources": ["web_1"], "EventStatus": "Scheduled",
                         "NotBefore": scheduled_events.format_not_before(time.time() + 600)}
                filler.put(scheduled_events.queue_message_text(scheduled_events.event_grid_event(
                    rid, props, delivery_id=str(uuid.uuid4()), event_time="2026-11-26T00:00:00Z")))
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
            counted: List[int] = []

            def count(response: Any) -> None:
                counted.append(1)

            from azure.storage.blob import ContainerClient
            from azure.storage.queue import QueueClient

            from vmss_terminate.central.leases import DEFAULT_CONTAINER, EventLeases

            source = QueueSource(QueueClient.from_connection_string(cs, name, raw_response_hook=count),
                                 QueueClient.from_connection_string(cs, name + "-poison", raw_response_hook=count),
                                 EventLeases(ContainerClient.from_connection_string(
                                     cs, DEFAULT_CONTAINER, raw_response_hook=count), duration=15),
                                 QueueSettings(lease_duration=15, metrics_interval=3600))
            sent = {}
            cpu0, wall0 = time.process_time(), time.monotonic()
            run_replica(source, arm, token, args.throughput, args.idle, sent)
            wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
            source.close()
            print(f"throughput, one replica on one core, {args.throughput} events queued: "
                  f"{args.throughput / wall:.0f} events/s ({wall:.1f} s wall, {cpu:.1f} s CPU of this process, "
                  f"{cpu / args.throughput * 1000:.1f} ms CPU per event), "
                  f"{len(counted) / args.throughput:.1f} Storage requests per event")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
