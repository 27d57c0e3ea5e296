"""Issue 26's acceptance on the real Azurite with the real central handler: 200 events (5 % delivered
twice by the emulated Event Grid, 2 % malformed messages) through two replica processes of the handler
(`central.run.build` with `open_queue_source`) are each hooked and acknowledged exactly once through
the Maintenance RP of the ARM emulator, the malformed ones land in the poison queue, and a replica
killed with SIGKILL mid-event loses nothing: the other takes the event over once its lease has expired
(its hook runs again: at least once) and acknowledges it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, List

import pytest
from helpers import poll_until, serve_arm_state

from vmss_terminate.central.storage_queue import poison_queue_name
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.imds.events import PlacementGroup
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

pytest.importorskip("azure.mgmt.resourcegraph")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

REPLICA = Path(__file__).with_name("queue_replica.py")
SUB = "44444444-0000-0000-0000-000000000001"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}


def lines(log: Path) -> List[List[str]]:
    if not log.exists():
        return []
    return [line.split() for line in log.read_text().splitlines() if line.strip()]


def test_200_events_two_replicas_each_handled_once_and_kill_9_loses_nothing(
        azurite_endpoints: Any, shared_arm: ArmServers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from azure.storage.queue import QueueClient

    state = ArmState(clock=SYSTEM_CLOCK)
    ss = state.add_scale_set(SUB, "rg", "web", capacity=3, extra_properties={"scheduledEventsPolicy": POLICY})
    group = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=False)
    state.maintenance.attach(ss, group)
    arm = serve_arm_state(shared_arm, state, monkeypatch)
    cs = azurite_endpoints.connection_string
    name, container = f"q{uuid.uuid4().hex[:20]}", f"l{uuid.uuid4().hex[:20]}"
    writer = StorageQueueWriter(cs, name)
    writer.create_queue()
    delivery = EventGridDelivery(writer, duplicate_rate=0.05, seed=26).attach(state.maintenance)
    queue = QueueClient.from_connection_string(cs, name)

    log = tmp_path / "hooks.log"
    env = {**os.environ, "QUEUE_CONNECTION_STRING": cs, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [str(log), f"{azurite_endpoints.queue}/{name}", container, SUB]

    def replica(label: str, **extra: str) -> "subprocess.Popen[bytes]":
        return subprocess.Popen([sys.executable, str(REPLICA), *args, str(tmp_path / f"{label}.json")],
                                env={**env, **extra}, stdin=subprocess.DEVNULL)

    def acked() -> Counter:  # type: ignore[type-arg]
        return Counter(a.event_id for a in state.maintenance.acknowledgements if a.accepted)

    # 1. a replica takes the first event and is killed (SIGKILL) in the middle of its hook
    stalled = group.add_event("Terminate", ["web_0"], not_before=SYSTEM_CLOCK.now() + 3600)
    assert delivery.flush()
    doomed = replica("doomed", STALL_EVENT=stalled)
    replicas: List["subprocess.Popen[bytes]"] = []
    try:
        assert poll_until(lambda: ["start", stalled, str(doomed.pid)] in lines(log), timeout=90)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
        assert not acked()
        # 2. 199 more events (5 % delivered twice) and 4 malformed messages, two replicas
        ids = [stalled] + [group.add_event("Terminate", [f"web_{i % 3}"], not_before=SYSTEM_CLOCK.now() + 3600)
                           for i in range(199)]
        for i in range(4):  # 2 %: messages no Event Grid would send
            queue.send_message(f"garbage {i}")
        assert delivery.flush()
        replicas = [replica("one"), replica("two")]
        assert poll_until(lambda: len(acked()) == len(ids), timeout=240), f"{len(acked())} of {len(ids)} acknowledged"
        assert poll_until(lambda: queue.get_queue_properties().approximate_message_count == 0, timeout=120)
    finally:
        for process in [doomed, *replicas]:
            if process.poll() is None:
                process.kill()
                process.wait()
        delivery.close()

    counts = acked()
    assert set(counts) == set(ids) and set(counts.values()) == {1}  # each acknowledged exactly once
    assert not state.maintenance.foreign_acknowledgements()
    duplicated = len(delivery.delivered) - len(ids)
    assert duplicated >= 1  # the emulated Event Grid did deliver some changes twice
    starts = Counter(eid for verb, eid, _ in lines(log) if verb == "start")
    assert set(starts) == set(ids)
    assert starts[stalled] == 2  # the killed replica's event: its hook ran again (at least once), taken over
    assert {eid for eid, n in starts.items() if n > 1} == {stalled}  # no duplicate ran anything twice
    takers = {pid for verb, eid, pid in lines(log) if eid == stalled}
    assert str(doomed.pid) in takers and len(takers) == 2  # taken over by one of the two replicas
    workers = Counter(pid for verb, eid, pid in lines(log) if eid != stalled)
    assert set(workers) == {str(p.pid) for p in replicas}  # both replicas handled events
    poison = QueueClient.from_connection_string(cs, poison_queue_name(name))
    moved = [json.loads(m.content) for m in poison.peek_messages(max_messages=32)]
    assert sorted(m["content"] for m in moved) == [f"garbage {i}" for i in range(4)]
    assert all("neither JSON nor base64" in m["reason"] for m in moved)
    assert arm is shared_arm
