"""Issue 26's acceptance on the real Azurite: 200 events (5 % delivered twice, 2 % malformed) through
two replica processes are each acted on and acknowledged exactly once, the malformed ones land in the
poison queue, and a replica killed with SIGKILL mid-event loses nothing: the other takes the event
over once its lease has expired (its hook runs again: at least once)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers import poll_until
from queue_events import event_id, properties, resource_id

from vmss_terminate.central import eventgrid
from vmss_terminate.central.storage_queue import poison_queue_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPLICA = Path(__file__).with_name("queue_replica.py")


def lines(log: Path) -> List[List[str]]:
    if not log.exists():
        return []
    return [line.split() for line in log.read_text().splitlines() if line.strip()]


def test_200_events_two_replicas_each_handled_once_and_kill_9_loses_nothing(azurite_endpoints: Any,
                                                                            tmp_path: Path) -> None:
    from azure.storage.queue import QueueClient

    rng = random.Random(26)
    cs = azurite_endpoints.connection_string
    name, container = f"q{uuid.uuid4().hex[:20]}", f"l{uuid.uuid4().hex[:20]}"
    queue = QueueClient.from_connection_string(cs, name)
    queue.create_queue()
    ids = [event_id() for _ in range(200)]
    duplicated = set(rng.sample(ids, 10))   # 5 %
    malformed = 4                           # 2 %
    stalled = ids[0]
    bodies: List[str] = []
    for eid in ids:
        event = eventgrid.event_grid_schema(resource_id(eid), properties(eid), delivery_id=str(uuid.uuid4()),
                                            event_time="2026-11-26T18:00:00Z")
        bodies.append(eventgrid.encode_body(event))
        if eid in duplicated:
            bodies.append(eventgrid.encode_body(event))  # Event Grid's double broadcast: the same id
    bodies += [f"garbage {i}" for i in range(malformed)]
    first, rest = bodies[0], bodies[1:]
    rng.shuffle(rest)
    for body in [first] + rest:
        queue.send_message(body)

    log = tmp_path / "handled.log"
    env = {**os.environ, "QUEUE_CONNECTION_STRING": cs, "PYTHONPATH": os.pathsep.join(sys.path)}
    doomed = subprocess.Popen([sys.executable, str(REPLICA), str(log), name, container],
                              env={**env, "STALL_EVENT": stalled}, stdin=subprocess.DEVNULL)
    try:
        # the doomed replica takes the first message and stalls in its hook; then the survivor starts
        assert poll_until(lambda: ["start", stalled, str(doomed.pid)] in lines(log), timeout=60)
        survivor = subprocess.Popen([sys.executable, str(REPLICA), str(log), name, container], env=env,
                                    stdin=subprocess.DEVNULL)
        try:
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.wait()

            def acked() -> Dict[str, int]:
                return Counter(eid for verb, eid, _ in lines(log) if verb == "ack")

            assert poll_until(lambda: len(acked()) == len(ids), timeout=180), f"{len(acked())} of {len(ids)} acked"
            poison = QueueClient.from_connection_string(cs, poison_queue_name(name))
            assert poll_until(lambda: queue.get_queue_properties().approximate_message_count == 0, timeout=60)
        finally:
            survivor.kill()
            survivor.wait()
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait()

    counts = acked()
    assert set(counts) == set(ids) and set(counts.values()) == {1}  # every event acknowledged exactly once
    starts = Counter(eid for verb, eid, _ in lines(log) if verb == "start")
    assert starts[stalled] == 2  # the killed replica's event: hooks at least once, taken over
    assert {eid for eid, n in starts.items() if n > 1} == {stalled}  # no duplicate ran anything twice
    ackers = {pid for verb, eid, pid in lines(log) if verb == "ack" and eid == stalled}
    assert ackers == {str(survivor.pid)}
    moved = [json.loads(m.content) for m in poison.peek_messages(max_messages=32)]
    assert sorted(m["content"] for m in moved) == [f"garbage {i}" for i in range(malformed)]
    assert all("neither JSON nor base64" in m["reason"] for m in moved)
