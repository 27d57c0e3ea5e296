"""Property: one odd entry never hides the others. Whatever a foreign event holds in any field --
non-finite, huge or odd-typed numbers, strings, lists, objects, an over-long integer literal -- the
document still yields our own Scheduled Terminate, which is drained and approved (review finding:
`DurationInSeconds: 1e400` on another VM's event used to reject every poll)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from hypothesis import example, given, settings
from hypothesis import strategies as st

from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.agent.imds import _json_int
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.events import EventsDocument
from vmss_terminate.pipeline.policy import Progress
from vmss_terminate_sim.emulator.server import EmulatorServer, Response

from .conftest import VM, Recorder, make_agent
from .test_adversarial import FixedImds

OWN_ID = "0F4D3C2B-1A09-4E8F-9D7C-6B5A4F3E2D1C"
OWN = {"EventId": OWN_ID, "EventType": "Terminate", "ResourceType": "VirtualMachine", "Resources": [VM],
       "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2099 18:29:47 GMT"}
FIELDS = ["EventId", "EventType", "ResourceType", "Resources", "EventStatus", "NotBefore", "Description",
          "EventSource", "DurationInSeconds"]
CONFIG = AgentConfig(vm_name=VM, imds_url="http://127.0.0.1:1").validated()

# JSON literals, written as text: some (1e400, a 5000-digit integer) cannot come out of json.dumps.
ODD_LITERALS = ["1e400", "-1e400", "1E999", "NaN", "Infinity", "-Infinity", "9" * 5000, "-" + "9" * 5000,
                "-0", "0.5", "true", "false", "null", "[]", "{}", '""', '"\\u0000"', "[1e400]",
                '{"a": 1e400}', '[null, 1E999, {"x": []}]', '"Mon, 01 Jan 0001 00:00:00 GMT"',
                '"Fri, 31 Dec 9999 23:59:59 GMT"', '"9999-12-31T23:59:59+14:00"', '"1e400"', '"-1"']
json_text = st.text(max_size=20).filter(lambda t: VM.lower() not in t.lower() and t.upper() != OWN_ID)
literal = st.sampled_from(ODD_LITERALS) | st.integers().map(str) | \
    st.floats(allow_nan=False, allow_infinity=False).map(repr) | json_text.map(json.dumps)


@st.composite
def foreign_event(draw: Any) -> str:
    """One entry as JSON text: some fields odd, the rest plausible; never naming our VM or id."""
    base: Dict[str, str] = {"EventId": json.dumps(draw(json_text)), "EventType": '"Terminate"',
                            "Resources": '["myvmss_4"]', "EventStatus": '"Scheduled"',
                            "NotBefore": '"Mon, 19 Sep 2099 18:29:47 GMT"'}
    for name in draw(st.lists(st.sampled_from(FIELDS), min_size=1, unique=True)):
        base[name] = draw(literal)
    if draw(st.booleans()):
        return draw(literal)  # the entry itself is not an object
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in base.items()) + "}"


def document_text(foreign: List[str], position: int) -> str:
    entries = list(foreign)
    entries.insert(position % (len(entries) + 1), json.dumps(OWN))
    return '{"DocumentIncarnation": 7, "Events": [' + ", ".join(entries) + "]}"


@settings(max_examples=300, deadline=None)
@given(st.lists(foreign_event(), min_size=1, max_size=4), st.integers(0, 4))
@example(['{"EventId": "other", "EventType": "Terminate", "Resources": ["myvmss_4"], "DurationInSeconds": 1e400}'], 0)
@example(['{"EventId": "other", "DurationInSeconds": -1e400}', '{"EventId": "o2", "DurationInSeconds": 1E999}'], 1)
def test_odd_foreign_events_never_hide_our_own_terminate(foreign: List[str], position: int) -> None:
    # the client's own JSON reading (imds._json_int), then the document, then the policy
    document = EventsDocument.from_json(json.loads(document_text(foreign, position), parse_int=_json_int))
    own = document.get(OWN_ID)
    assert own is not None and own.names(VM) and own.scheduled and own.others(VM) == []
    assert policy.drains(own, VM, CONFIG)  # /readyz turns 503
    assert policy.next_step(own, VM, CONFIG, Progress(), has_hooks=True).action == policy.RUN_HOOKS
    assert policy.next_step(own, VM, CONFIG, Progress(hooks_started=True, hooks_finished=True),
                            has_hooks=True).action == policy.APPROVE


class RawImds(FixedImds):
    """Serves a Scheduled Events document as raw bytes (1e400 is valid JSON no json.dumps writes)."""

    def __init__(self, body: str) -> None:
        super().__init__([])
        self.body = body.encode()

    def document(self) -> Response:
        return Response(200, self.body, {"Content-Type": "application/json"})


def test_a_foreign_event_with_an_infinite_duration_does_not_stop_our_drain_over_http() -> None:
    foreign = ['{"EventId": "A1", "EventType": "Reboot", "Resources": ["myvmss_4"], "EventStatus": "Scheduled",'
               ' "NotBefore": "Mon, 19 Sep 2099 18:29:47 GMT", "DurationInSeconds": 1e400}',
               '{"EventId": "A2", "EventType": "Freeze", "Resources": ["myvmss_5"], "DurationInSeconds": -1e400}',
               '{"EventId": "A3", "DurationInSeconds": 1E999, "NotBefore": {"odd": 1e400}, "Resources": 7}',
               '{"EventId": ["not", "a", "string"]}']
    app = RawImds(document_text(foreign, 2))
    decisions = Recorder()
    ran: List[str] = []
    with EmulatorServer(app) as server:
        agent = make_agent(server.url)
        agent.on("Terminate", lambda event, ctx: ran.append(event.event_id))
        agent.subscribe(decisions)
        agent.run_once(retry_for=2.0)
    assert ran == [OWN_ID]
    assert app.posts == [{"StartRequests": [{"EventId": OWN_ID}]}]
    assert "drain_started" in decisions.kinds(OWN_ID) and "approval_sent" in decisions.kinds(OWN_ID)
    (unreadable,) = [d for d in decisions.items if d.kind == "event_unreadable"]
    assert "entry 4" in unreadable.message  # the entry without a string EventId; the others are handled
