"""What a central handler's once-per-event steps are told of the VMs: the JSON webhook's payload and
a Python handler's context carry `vm_name` "" and `vm_names`, every VM the event lists -- never the
pipeline's every-listed-VM sentinel ("*") as a VM name."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from vmss_terminate.central import ScaleSetRef, event_from_fields
from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.pipeline import Event
from vmss_terminate.pipeline.hooks import HookContext
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import SUB, Estate


@pytest.fixture
def receiver() -> Iterator[List[Dict[str, Any]]]:
    bodies: List[Dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        bodies.append({"url": f"http://127.0.0.1:{server.server_address[1]}/hook"})
        yield bodies
    finally:
        server.shutdown()
        server.server_close()


def test_the_webhook_and_a_python_handler_get_every_listed_vm_not_the_sentinel(
        live_arm: ArmServers, live: Estate, receiver: List[Dict[str, Any]], tmp_path: Path) -> None:
    url = receiver.pop()["url"]
    group = live.groups["lin"]
    eid = group.add_event("Terminate", ["lin_1", "lin_2"], not_before=SYSTEM_CLOCK.now() + 600)
    central = build(Scope.build(subscriptions=[SUB]), HandlerConfig(webhook=url),
                    connection=Connection(arm_endpoint=live_arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                    state_file=str(tmp_path / "state.json"))
    contexts: List[HookContext] = []
    try:
        central.handler.pipeline.add_handler("Terminate", lambda event, context: contexts.append(context))
        ref = ScaleSetRef.parse(live.set_id("lin"))
        event = event_from_fields(ref, group.get(eid).to_imds())  # type: ignore[union-attr]
        outcome = central.handler.handle(event, central.handler.lookup([ref])[ref.key])
    finally:
        central.close()
    assert outcome.acknowledged is not None and outcome.acknowledged.ok
    assert len(receiver) == 1
    assert receiver[0]["vm_name"] == "" and receiver[0]["vm_names"] == ["lin_1", "lin_2"]
    assert Event.from_json(receiver[0]["event"]).resources == ("lin_1", "lin_2")
    assert [(c.vm_name, c.vm_names) for c in contexts] == [("", ("lin_1", "lin_2"))]
