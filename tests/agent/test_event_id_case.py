"""Issue 27 item 7: an EventId whose letter case changes between answers is one event: its hooks run
once (IMDS compares GUIDs case-insensitively), and the approval names it as the latest answer does."""

from __future__ import annotations

import threading
from typing import Any, List

from inprocess import InProcessTransport

from vmss_terminate.agent import HookContext
from vmss_terminate.pipeline.events import Event
from vmss_terminate_sim.emulator.server import Request, Response

from .conftest import VM, Running, make_agent

EID = "5b7e1c2d-aaaa-4bbb-8ccc-0000000000ef"


class FlippingCase:
    def __init__(self) -> None:
        self.gets = 0
        self.posts: List[Any] = []
        self.polled = threading.Condition()

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/metadata/instance"):
            return Response.json(200, {"compute": {"name": VM}})
        if request.method == "POST":
            self.posts.append(request.json())
            return Response(200)
        with self.polled:
            self.gets += 1
            self.polled.notify_all()
            eid = EID.upper() if self.gets % 2 else EID
        event = {"EventId": eid, "EventType": "Terminate", "ResourceType": "VirtualMachine", "Resources": [VM],
                 "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2099 18:29:47 GMT"}
        return Response.json(200, {"DocumentIncarnation": 1, "Events": [event]})


def test_an_event_id_changing_letter_case_runs_its_hooks_once() -> None:
    app = FlippingCase()
    agent = make_agent("http://127.0.0.1:9", transport=InProcessTransport(app))
    runs: List[str] = []

    def hook(event: Event, ctx: HookContext) -> None:
        runs.append(event.event_id)
        with app.polled:  # stays running over several answers, each spelling the EventId the other way
            target = app.gets + 6
            app.polled.wait_for(lambda: app.gets >= target, 10)

    agent.on("Terminate", hook)
    with Running(agent) as running:
        assert running.decisions.wait_kind("approval_sent", timeout=20)
        with app.polled:
            target = app.gets + 6
            app.polled.wait_for(lambda: app.gets >= target, 10)
    assert len(runs) == 1
    assert len(app.posts) == 1
    assert app.posts[0]["StartRequests"][0]["EventId"].lower() == EID
