"""`vmss-terminate central run --source queue` as a process: the connection string from the named
variable (never printed), events the emulated Event Grid put in a real Azurite queue acknowledged
once, the queue left empty, and the queue's metrics on /metrics."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, List

import pytest
import requests
from clifork import run_forked
from helpers import poll_until, serve_arm_state

from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.eventgrid import EventGridDelivery
from vmss_terminate_sim.emulator.imds.events import PlacementGroup
from vmss_terminate_sim.emulator.storagequeue import StorageQueueWriter

pytest.importorskip("azure.mgmt.resourcegraph")
pytestmark = pytest.mark.timeout(180)

SUB = "55555555-0000-0000-0000-000000000001"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_central_run_source_queue_acknowledges_and_empties_the_queue(
        azurite_endpoints: Any, shared_arm: ArmServers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from azure.storage.queue import QueueClient

    state = ArmState(clock=SYSTEM_CLOCK)
    ss = state.add_scale_set(SUB, "rg", "web", capacity=3, extra_properties={"scheduledEventsPolicy": POLICY})
    group = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=False)
    state.maintenance.attach(ss, group)
    serve_arm_state(shared_arm, state, monkeypatch)
    cs = azurite_endpoints.connection_string
    name = f"q{uuid.uuid4().hex[:20]}"
    writer = StorageQueueWriter(cs, name)
    writer.create_queue()
    delivery = EventGridDelivery(writer).attach(state.maintenance)
    ids = [group.add_event("Terminate", [f"web_{i}"], not_before=SYSTEM_CLOCK.now() + 600) for i in range(3)]
    assert delivery.flush()
    delivery.close()
    queue = QueueClient.from_connection_string(cs, name)
    port = _free_port()
    command: List[str] = [sys.executable, "-m", "vmss_terminate", "central", "run", "--subscription", SUB,
                          "--source", "queue", "--queue-url", f"{azurite_endpoints.queue}/{name}",
                          "--queue-connection-string-env", "MY_QUEUE", "--poll-interval", "0.5",
                          "--listen", f"127.0.0.1:{port}", "--state-file", str(tmp_path / "state.json")]
    proc = subprocess.Popen(command, env={**os.environ, "MY_QUEUE": cs}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        accepted = lambda: sorted(a.event_id for a in state.maintenance.acknowledgements if a.accepted)  # noqa: E731
        assert poll_until(lambda: accepted() == sorted(ids), timeout=120)
        assert poll_until(lambda: queue.get_queue_properties().approximate_message_count == 0, timeout=60)
        http = requests.Session()
        http.trust_env = False
        text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "vmss_terminate_queue_messages_received_total 3" in text
        assert "vmss_terminate_queue_settled_total" in text and "vmss_terminate_queue_depth" in text
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert len(state.maintenance.acknowledgements) == 3  # once each
    assert cs not in out + err and "AccountKey" not in out + err  # the connection string is never printed


def test_the_connection_string_variable_must_be_set(tmp_path: Path) -> None:
    result = run_forked(["central", "run", "--subscription", SUB, "--source", "queue", "--queue-url",
                         "https://acct.queue.core.windows.net/events", "--queue-connection-string-env", "NOT_SET_ANYWHERE"],
                        {**os.environ, "NOT_SET_ANYWHERE": ""}, os.getcwd(), timeout=60)  # a process, forked warm
    assert result.returncode == 2
    assert "NOT_SET_ANYWHERE" in result.stderr and "is not set" in result.stderr
    assert "Traceback" not in result.stderr
