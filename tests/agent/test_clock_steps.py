"""Issue 27 item 2: deadlines are anchored on the monotonic clock when the event is seen; a step of
the VM's wall clock (NTP, chrony's makestep) seen by the agent's process only -- the monotonic
clock untouched -- neither kills a hook early nor lets one run past NotBefore."""

from __future__ import annotations

import threading
from email.utils import formatdate
from typing import Any, List, Tuple

import pytest
from inprocess import InProcessTransport

from vmss_terminate.agent import HookContext
from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline.events import Event
from vmss_terminate_sim.emulator.server import Request, Response

from .conftest import VM, Recorder, make_agent

EID = "3C1B5E2A-0000-4000-8000-000000000002"
START = 1_800_000_000.0  # the true time (Azure's) when the agent first sees the event
NOTICE = 600.0           # NotBefore is this far away, in true time
MARGIN = 15.0


class DrivenClock(ManualClock):
    """Time moves only when the test's hook moves it (`advance`, `step`): the agent's waits pass a
    few real milliseconds and return, so no thread of the agent races the hook's clock."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.job_waits = 0  # waits of the job threads: each one follows a look at the deadline
        self.waited = threading.Condition()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if threading.current_thread().name.startswith("hooks:"):
            with self.waited:
                self.job_waits += 1
                self.waited.notify_all()
        return event.wait(min(max(seconds, 0.0), 0.005))

    def looked(self, times: int = 3) -> None:
        """Return once the job thread has looked at its deadline `times` more times (bounded)."""
        with self.waited:
            target = self.job_waits + times
            self.waited.wait_for(lambda: self.job_waits >= target, 10)


class OneTerminate:
    """IMDS with one Terminate for us, NotBefore NOTICE true seconds after START; records each approval
    with the monotonic time it arrived (the true time since START: the monotonic clock never steps)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.posts: List[Tuple[Any, float]] = []

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/metadata/instance"):
            return Response.json(200, {"compute": {"name": VM}})
        if request.method == "POST":
            self.posts.append((request.json(), self.clock.monotonic() - START))
            return Response(200)
        event = {"EventId": EID, "EventType": "Terminate", "ResourceType": "VirtualMachine", "Resources": [VM],
                 "EventStatus": "Scheduled", "NotBefore": formatdate(START + NOTICE, usegmt=True)}
        return Response.json(200, {"DocumentIncarnation": 1, "Events": [event]})


def _agent(clock: ManualClock) -> "tuple[Any, OneTerminate, Recorder]":
    app = OneTerminate(clock)
    agent = make_agent("http://127.0.0.1:9", clock=clock, transport=InProcessTransport(app),
                       safety_margin=MARGIN)
    decisions = Recorder()
    agent.subscribe(decisions)
    return agent, app, decisions


@pytest.mark.parametrize("offset, step", [
    (0.0, +1200.0),      # a forward NTP step of 20 minutes mid-hook
    (-1200.0, +1200.0),  # the VM's clock 20 minutes behind at first sight, then corrected
])
def test_a_forward_wall_clock_step_mid_hook_does_not_kill_the_hook(offset: float, step: float) -> None:
    clock = DrivenClock(start=START)  # monotonic counts true time from START ...
    clock.step(offset)  # ... and the VM's wall clock is off by `offset` at first sight
    agent, app, decisions = _agent(clock)
    finished = threading.Event()

    def thirty_second_hook(event: Event, ctx: HookContext) -> None:
        clock.step(step)  # the process sees its wall clock jump; monotonic does not move
        for _ in range(30):  # the hook takes 30 s, while the agent keeps looking at its deadline
            clock.advance(1.0)
            clock.looked()
        finished.set()

    agent.on("Terminate", thirty_second_hook)
    agent.run_once(retry_for=5.0)
    assert finished.is_set()
    assert "hook_finished" in decisions.kinds(EID), decisions.kinds(EID)
    assert "hook_failed" not in decisions.kinds(EID)
    ((body, at),) = app.posts
    assert body == {"StartRequests": [{"EventId": EID}]}
    assert 30.0 <= at < NOTICE  # approved after the hook's 30 s, not 6.8 s after the event appeared


def test_a_backward_wall_clock_step_still_ends_the_hook_at_its_deadline() -> None:
    clock = DrivenClock(start=START)
    agent, app, decisions = _agent(clock)
    released = threading.Event()

    def hung_hook(event: Event, ctx: HookContext) -> None:
        clock.step(-3600.0)  # an hour back: on the wall clock the deadline is an hour further away
        while clock.monotonic() - START < NOTICE - MARGIN + 1.0:  # runs past the deadline ...
            clock.advance(1.0)
        released.wait(10)  # ... and hangs: the agent must give up on it by itself
        while not app.posts and clock.monotonic() - START < 2 * 3600:  # unfixed: approved an hour late
            clock.advance(10.0)

    agent.on("Terminate", hung_hook)
    def release_once_approved(decision: Any) -> None:
        if decision.kind == "approval_sent":
            released.set()

    agent.subscribe(release_once_approved)
    try:
        agent.run_once(retry_for=5.0)
    finally:
        released.set()
    failed = [d for d in decisions.items if d.kind == "hook_failed" and d.event_id == EID]
    assert failed and failed[0].data.get("outcome") == "deadline"
    ((_, at),) = app.posts  # --on-hook-failure approve (the default): approved at the deadline
    assert NOTICE - MARGIN <= at <= NOTICE - MARGIN + 1.0  # not an hour later, after the VM was deleted
