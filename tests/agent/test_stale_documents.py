"""Issue 27 item 1: a lagging IMDS replica (older DocumentIncarnation) never gets a decision or an
approval made on its document; item 6: one undecodable byte never hides the other entries."""

from __future__ import annotations

import json
import random
import threading
from typing import Any, Dict, List

import pytest
from inprocess import InProcessTransport

from vmss_terminate.agent import ImdsClient, ImdsError
from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline.events import owns
from vmss_terminate_sim.emulator.server import Request, Response

from .conftest import VM, Recorder, make_agent

OTHER = "webvmss_7"
EID = "9A3E2C1D-0000-4000-8000-00000000001B"


def terminate(resources: List[str]) -> Dict[str, Any]:
    return {"EventId": EID, "EventType": "Terminate", "ResourceType": "VirtualMachine", "Resources": resources,
            "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2099 18:29:47 GMT"}


class LaggingReplicas:
    """IMDS behind two replicas: the newest document (incarnation 2: the Terminate now also names
    webvmss_7) and a lagging one still answering incarnation 1 (the Terminate for us alone), picked
    at random for every GET after the first. Records every approval POST."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.old = {"DocumentIncarnation": 1, "Events": [terminate([VM])]}
        self.new = {"DocumentIncarnation": 2, "Events": [terminate([VM, OTHER])]}
        self.gets = 0
        self.stale_answers = 0
        self.posts: List[Any] = []
        self.enough = threading.Event()

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/metadata/instance"):
            return Response.json(200, {"compute": {"name": VM}})
        if request.method == "POST":
            self.posts.append(request.json())
            return Response(200)
        self.gets += 1
        if self.gets >= 200:
            self.enough.set()
        if self.gets > 1 and self.rng.random() < 0.5:
            self.stale_answers += 1
            return Response.json(200, self.old)
        return Response.json(200, self.new)


@pytest.mark.parametrize("seed", range(6))
def test_a_replica_answering_older_incarnations_at_random_never_gets_a_shared_terminate_approved(seed: int) -> None:
    app = LaggingReplicas(seed)
    clock = ManualClock()  # the loop's waits pass at once: 200 polls take no real time
    agent = make_agent("http://127.0.0.1:9", clock=clock, transport=InProcessTransport(app))
    decisions = Recorder()
    agent.subscribe(decisions)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    assert app.enough.wait(30), "the agent stopped polling"
    stop.set()
    thread.join(15)
    assert not thread.is_alive()
    assert app.stale_answers > 50  # the fault really was there, many times
    assert app.posts == []  # webvmss_7 is never released
    assert "shared_not_approved" in decisions.kinds(EID) or "withheld" in " ".join(decisions.kinds(EID))
    assert "approval_sent" not in decisions.kinds(EID)
    # every decision about the event was made on the newest document: it names webvmss_7
    for decision in decisions.items:
        if decision.event_id == EID and "resources" in decision.data:
            assert decision.data["resources"] == [VM, OTHER]


def test_the_recheck_before_the_post_waits_for_a_current_document() -> None:
    """The guard's re-check right before the POST gets the lagging replica: nothing is posted on it
    (here the newest document, 2, has the event for us alone; the rule is the same)."""
    app = LaggingReplicas(0)
    app.new = {"DocumentIncarnation": 2, "Events": [terminate([VM])]}
    client = ImdsClient("http://127.0.0.1:9", clock=ManualClock(), transport=InProcessTransport(app),
                        max_per_second=1000)
    document = client.get_events(retry_for=60.0)  # the first answer: the newest document
    assert document.incarnation == 2
    app.rng.random = lambda: 0.0  # type: ignore[method-assign]  # the lagging replica only, from here on
    with pytest.raises(ImdsError) as caught:
        client.approve(EID, VM, allow_shared=False, retry_for=5.0)
    assert caught.value.outcome == "stale" or "stale" in str(caught.value)
    assert app.posts == []
    assert client.last_document is not None and client.last_document.incarnation == 2


def test_only_older_answers_for_long_enough_are_taken_as_imds_counting_again() -> None:
    """A reset of the count (every answer older, for minutes) must not blind the agent for good."""
    app = LaggingReplicas(0)
    clock = ManualClock()
    client = ImdsClient("http://127.0.0.1:9", clock=clock, transport=InProcessTransport(app), max_per_second=1000)
    assert client.get_events().incarnation == 2
    app.new = app.old  # from now on IMDS says 1 only
    document = client.get_events(retry_for=None)
    assert document.incarnation == 1
    assert app.gets > 10  # it was not believed at once


# -- item 6: an undecodable byte ----------------------------------------------------------------------

class RawImds:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.posts: List[Any] = []

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/metadata/instance"):
            return Response.json(200, {"compute": {"name": VM}})
        if request.method == "POST":
            self.posts.append(request.json())
            return Response(200)
        return Response(200, self.body, {"Content-Type": "application/json"})


def _document(*events: Dict[str, Any]) -> bytes:
    return json.dumps({"DocumentIncarnation": 3, "Events": list(events)}).encode()


def test_an_invalid_utf8_byte_in_a_foreign_description_does_not_hide_our_terminate() -> None:
    foreign = dict(terminate(["othervmss_1"]), EventId="F1", Description="PLACEHOLDER")
    body = _document(foreign, terminate([VM])).replace(b"PLACEHOLDER", b"caf\xe9 \xff")
    app = RawImds(body)
    agent = make_agent("http://127.0.0.1:9", transport=InProcessTransport(app))
    agent.run_once(retry_for=2.0)
    assert app.posts == [{"StartRequests": [{"EventId": EID}]}]


def test_a_name_or_event_id_with_an_undecodable_byte_is_never_ours() -> None:
    # a bad byte in a neighbour's name: the event is shared, never approved
    shared = _document(terminate([VM, "webvmssPLACE"])).replace(b"PLACE", b"\xff")
    app = RawImds(shared)
    agent = make_agent("http://127.0.0.1:9", transport=InProcessTransport(app))
    agent.run_once(retry_for=2.0)
    assert app.posts == []
    # a bad byte in our own name: not ours; in an EventId: an unreadable entry, the others handled
    mangled = _document(terminate([VM + "PLACE"]), dict(terminate([VM]), EventId="E\u00e9PLACE"))
    app = RawImds(mangled.replace(b"PLACE", b"\xfe"))
    agent = make_agent("http://127.0.0.1:9", transport=InProcessTransport(app))
    decisions = Recorder()
    agent.subscribe(decisions)
    agent.run_once(retry_for=2.0)
    assert app.posts == []
    assert "event_unreadable" in decisions.kinds()
    assert not owns(["myvmss\ufffd3"], "myvmss\ufffd3")  # two different bad bytes read the same
