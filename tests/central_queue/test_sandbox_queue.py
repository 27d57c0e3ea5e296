"""`sandbox --central --source queue`: the sandbox starts Azurite itself, and a scale-in's Terminate
events reach its queue as Event Grid would deliver them; without Azurite it says how to install it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest
import requests
from clifork import run_forked
from helpers import interrupt, poll_until

from vmss_terminate.central.eventgrid import parse_message

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _read_lines(stream: Any, sink: "queue.Queue[str]") -> None:
    for line in stream:
        sink.put(line)


@pytest.mark.skipif(os.name == "nt", reason="SIGINT delivery to a child differs on Windows")
def test_scale_in_events_reach_the_sandboxs_azurite_queue(azurite_endpoints: Any) -> None:
    from azure.storage.queue import QueueClient

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vmss_terminate", "sandbox", "--instances", "3", "--central", "--source", "queue",
         "--output", "json", "--duration", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        info: Dict[str, Any] = json.loads(lines.get(timeout=90))
        grid = info["queue"]
        cs = info["env"][grid["connectionStringEnv"]]
        box = info["env"]
        http = requests.Session()
        http.trust_env = False
        token = http.get(box["IDENTITY_ENDPOINT"], params={"api-version": "2019-08-01",
                                                           "resource": "https://management.azure.com"},
                         headers={"X-IDENTITY-HEADER": box["IDENTITY_HEADER"]}, timeout=10).json()["access_token"]
        vmss = (f"{box['VMSS_TERMINATE_ARM_ENDPOINT']}/subscriptions/{box['AZURE_SUBSCRIPTION_ID']}/resourceGroups/"
                f"{info['resource_group']}/providers/Microsoft.Compute/virtualMachineScaleSets/{info['name']}")
        answer = http.patch(vmss, params={"api-version": "2024-11-01"}, json={"sku": {"capacity": 1}},
                            headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert answer.status_code in (200, 202), answer.text
        client = QueueClient.from_connection_string(cs, grid["url"].rsplit("/", 1)[1])
        seen: List[Any] = []

        def two_terminates() -> bool:
            seen[:] = [parse_message(m.content)[0] for m in client.peek_messages(max_messages=32)]
            return len({n.event_id for n in seen if n.event.event_type == "Terminate"}) >= 2

        assert poll_until(two_terminates, timeout=60)
        assert all(n.scale_set.name == info["name"] and n.status == "Scheduled" for n in seen)
        assert interrupt(proc, timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_without_azurite_the_sandbox_says_how_to_install_it(tmp_path: Path) -> None:
    env = {**os.environ, "VMSS_TERMINATE_AZURITE_DIR": str(tmp_path / "nothing-here")}
    result = run_forked(["sandbox", "--central", "--source", "queue", "--duration", "1"], env, os.getcwd(),
                        timeout=60)  # a process of its own, forked from a warm interpreter
    assert result.returncode == 1
    assert "-m vmss_terminate_sim.azurite install" in result.stderr or "npm" in result.stderr
    assert "Traceback" not in result.stderr


def test_source_needs_central() -> None:
    result = run_forked(["sandbox", "--source", "queue"], os.environ, os.getcwd(), timeout=60)
    assert result.returncode == 2 and "--source needs --central" in result.stderr


def test_demo_central_source_queue_completes_the_story_through_the_queue(azurite_endpoints: Any) -> None:
    result = subprocess.run([sys.executable, "-m", "vmss_terminate", "demo", "--central", "--source", "queue",
                             "-o", "json"], capture_output=True, text=True, timeout=170)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["ok"] and report["options"]["source"] == "queue"
    assert report["totals"]["central_acknowledged"] == 2 and report["totals"]["agents"] == 0
    assert any(e["kind"] == "queue_ready" for e in report["timeline"])


def test_demo_source_queue_needs_central() -> None:
    result = run_forked(["demo", "--source", "queue"], os.environ, os.getcwd(), timeout=60)
    assert result.returncode == 2 and "--central" in result.stderr
