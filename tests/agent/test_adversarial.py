"""Attempts to make the agent approve what it must not, or die on odd input (review findings)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
from inprocess import InProcessTransport

from vmss_terminate.agent import AgentConfig, ForeignEventError, ImdsClient, ImdsError, StateStore
from vmss_terminate.clock import ManualClock
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.events import Event
from vmss_terminate_sim.emulator.server import Request, Response

from .conftest import VM, Imds, Recorder, Running, make_agent, run_cli

OTHER = "myvmss_30"


class FixedImds:
    """Serves a hand-written Scheduled Events document (shapes the emulator refuses to produce)
    and records every approval POST."""

    def __init__(self, events: List[Dict[str, Any]]) -> None:
        self.events = events
        self.posts: List[Any] = []

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/metadata/instance"):
            return Response.json(200, {"compute": {"name": VM}})
        if request.method == "POST":
            self.posts.append(request.json())
            return Response(200)
        return self.document()

    def document(self) -> Response:
        return Response.json(200, {"DocumentIncarnation": 1, "Events": self.events})


def terminate(event_id: str, resources: Any, **extra: Any) -> Dict[str, Any]:
    event = {"EventId": event_id, "EventType": "Terminate", "ResourceType": "VirtualMachine",
             "Resources": resources, "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2099 18:29:47 GMT"}
    event.update(extra)
    return event


def run_once_against(events: List[Dict[str, Any]], **config: Any) -> "tuple[FixedImds, Recorder]":
    """One agent pass over a hand-written document, carried in process (canned answers need no socket)."""
    app = FixedImds(events)
    decisions = Recorder()
    agent = make_agent("http://127.0.0.1:9", transport=InProcessTransport(app), **config)
    agent.subscribe(decisions)
    agent.run_once(retry_for=2.0)
    return app, decisions


def test_another_vm_added_while_hooks_run_is_caught_right_before_the_post(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url)
    decisions = Recorder()
    agent.subscribe(decisions)
    # The hook adds a neighbour after the agent last polled: only a re-check right before the
    # POST can see it (run_once does not poll again before approving).
    agent.on("Terminate", lambda event, ctx: imds.group.update_event(eid, resources=[VM, OTHER]))
    agent.run_once(retry_for=2.0)
    assert imds.group.approvals == []
    assert "shared_not_approved" in decisions.kinds(eid)
    assert "approval_sent" not in decisions.kinds(eid)


def test_event_that_stops_naming_us_while_hooks_run_is_not_approved(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, approve_shared=True)
    agent.on("Terminate", lambda event, ctx: imds.group.update_event(eid, resources=[OTHER]))
    agent.run_once(retry_for=2.0)
    assert imds.group.approvals == []


def test_event_id_repeated_for_another_vm_is_never_approved() -> None:
    app, decisions = run_once_against([terminate("E1", [VM]), terminate("E1", [OTHER])])
    assert app.posts == []


def test_non_string_resource_entries_count_as_other_vms() -> None:
    app, decisions = run_once_against([terminate("E1", [VM, {"name": OTHER}]), terminate("E2", [VM, None])])
    assert app.posts == []
    assert "shared_not_approved" in decisions.kinds("E1") and "shared_not_approved" in decisions.kinds("E2")


@pytest.mark.parametrize("resources", ["myvmss_3", {"0": "myvmss_3"}, None, [], ["myvmss_3 "], ["myvmss_30"]])
def test_resources_not_naming_us_as_an_element_are_not_ours(resources: Any) -> None:
    app, decisions = run_once_against([terminate("E1", resources)])
    assert app.posts == []
    assert "not_ours" in decisions.kinds("E1")


def test_event_type_and_status_case_variants_are_understood() -> None:
    app, decisions = run_once_against([terminate("E1", [VM.upper()], EventType="terminate",
                                                 EventStatus="scheduled")])
    assert app.posts == [{"StartRequests": [{"EventId": "E1"}]}]
    event = Event.from_json(terminate("E2", [VM], EventType="TERMINATE", EventStatus="STARTED"))
    assert (event.event_type, event.started, event.raw["EventType"]) == ("Terminate", True, "TERMINATE")


def test_client_guard_refuses_shared_and_retyped_events(imds: Imds) -> None:
    shared = imds.group.add_event("Terminate", [VM, OTHER])
    reboot = imds.group.add_event("Reboot", [VM])
    client = ImdsClient(imds.url, first_call_timeout=2.0, read_timeout=2.0, max_per_second=100)
    client.get_events()
    with pytest.raises(ForeignEventError) as caught:
        client.approve(shared, VM)
    assert caught.value.others == [OTHER]
    with pytest.raises(ForeignEventError):
        client.approve(reboot, VM, event_type="Terminate")
    assert imds.server.log.count("POST") == 0
    client.approve(shared, VM, allow_shared=True)
    assert [a.event_id for a in imds.group.approvals] == [shared]


@pytest.mark.timeout(20)
def test_retry_after_nan_still_backs_off_and_gives_up(imds: Imds) -> None:
    imds.server.faults.add(status=429, headers={"Retry-After": "nan"}, times=10**6)
    clock = ManualClock()  # moves only by the client's waits: a NaN wait would never end the budget
    client = ImdsClient(imds.url, clock=clock, first_call_timeout=2.0, read_timeout=2.0, max_per_second=1000)
    with pytest.raises(ImdsError):
        client.get_events(retry_for=5.0)


@pytest.mark.parametrize("field", ["poll_interval", "safety_margin", "request_timeout", "first_call_timeout",
                                   "kill_grace"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_durations_are_refused(field: str, value: float) -> None:
    with pytest.raises(UsageError):
        AgentConfig(imds_url="http://127.0.0.1:1", state_file=":memory:", **{field: value}).validated()


def test_a_deeply_nested_state_file_is_logged_and_ignored_and_the_drain_goes_on(
        imds: Imds, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"version": 1, "events": ' + "[" * 100000 + "]" * 100000 + "}")
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, state_file=str(state))
    agent.run_once(retry_for=2.0)
    assert imds.approved_ids() == [eid]
    assert "nested too deeply" in caplog.text


def test_state_fields_of_the_wrong_type_are_dropped_not_fatal(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 1, "events": {eid: {
        "hooks_started": "yesterday", "steps_done": 5, "hook_pid": "abc", "hooks_result": ["ok"], "approved": True}}}))
    ran: List[str] = []
    agent = make_agent(imds.url, state_file=str(state))
    agent.on("Terminate", lambda event, ctx: ran.append(event.event_id))
    agent.run_once(retry_for=2.0)
    assert ran == [eid] and imds.approved_ids() == [eid]  # as if the record had never been written


def test_temp_files_left_by_a_killed_agent_are_removed_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    ours, legacy, fresh_legacy = tmp_path / ".state.json-abc.tmp", tmp_path / ".state-old.tmp", tmp_path / ".state-new.tmp"
    neighbour = tmp_path / ".other.json-abc.tmp"  # another state file's write in progress
    for leftover in (ours, legacy, fresh_legacy, neighbour):
        leftover.write_text("{")
    os.utime(legacy, (time.time() - 3600, time.time() - 3600))
    StateStore(str(state)).update("E", approved=1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".other.json-abc.tmp", ".state-new.tmp", "state.json"])


def test_state_file_with_wrong_shape_is_treated_as_corrupt(tmp_path: Path) -> None:
    for content in ({"events": []}, {"events": "x"}, [], "text"):
        path = tmp_path / "state.json"
        path.write_text(json.dumps(content))
        assert StateStore(str(path)).event_ids() == []


def test_unwritable_state_file_does_not_block_hooks_or_approval(imds: Imds, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    eid = imds.group.add_event("Terminate", [VM])
    ran: List[str] = []
    agent = make_agent(imds.url, state_file=str(state))
    state.mkdir()  # after start-up: every atomic replace onto it fails, as on a full or read-only disk
    agent.on("Terminate", lambda event, ctx: ran.append(event.event_id))
    agent.run_once(retry_for=2.0)
    assert ran == [eid]
    assert imds.approved_ids() == [eid]


@pytest.mark.parametrize("args", [
    ["--request-timeout", "inf"],
    ["--poll-interval", "nan"],
    ["--safety-margin", "nan"],
    ["--imds-url", "http://127.0.0.1:abc"],
    ["--imds-url", "http://127.0.0.1:99999"],
    ["--imds-url", "http://user@127.0.0.1"],
    ["--api-version", "2019-13-45"],
    ["--hook", "/nonexistent/drain.sh --token s3cret"],
    ["--hook", "no-such-program-vmss-terminate"],
    ["--retry-for", "nan"],
    ["--safety-margin", "900"],
    ["--safety-margin", "1e9"],
    ["--stop-grace", "-1"],
    ["--imds-url", ""],
    ["--imds-url", "http://127.0.0.1:0"],
    ["--hook-events", ""],
    ["--approve", ""],
    ["--vm-name", ""],
])
def test_more_bad_input_is_one_line_exit_2_before_any_request(imds: Imds, tmp_path: Path, args: list) -> None:
    full = ["run", "--once", *args, "--state-file", str(tmp_path / "s.json")]
    if "--imds-url" not in args:
        full += ["--imds-url", imds.url]
    result = run_cli(*full)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "s3cret" not in result.stderr
    assert imds.server.log.count() == 0


@pytest.mark.parametrize("args", [
    ["--webhook", "http://[bad/x?token=s3cret"],
    ["--webhook", "ftp://user:s3cret@example.invalid/x"],
    ["--hook", "drain --token s3cret 'unbalanced"],
])
def test_bad_hook_or_webhook_is_refused_without_echoing_secrets(imds: Imds, tmp_path: Path, args: list) -> None:
    result = run_cli("run", "--once", *args, "--imds-url", imds.url, "--state-file", str(tmp_path / "s.json"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "s3cret" not in result.stderr


class NestedImds(FixedImds):
    """Answers the first Scheduled Events GETs with absurdly nested JSON, then a real document."""

    def __init__(self, events: List[Dict[str, Any]], bad_answers: int) -> None:
        super().__init__(events)
        self.bad_answers = bad_answers

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/metadata/scheduledevents") and request.method == "GET" and self.bad_answers:
            self.bad_answers -= 1
            return Response(200, b"[" * 100000, {"Content-Type": "application/json"})
        return super().handle(request)


def test_absurdly_nested_json_is_a_malformed_answer_not_a_crash(no_sockets: None) -> None:
    app = NestedImds([terminate("E1", [VM])], bad_answers=2)
    agent = make_agent("http://127.0.0.1:9", transport=InProcessTransport(app))
    agent.client.backoff_cap = 0.01
    with Running(agent) as running:
        assert running.decisions.wait_kind("approval_sent", "E1")
    assert "imds_error" in running.decisions.kinds()
    assert app.posts == [{"StartRequests": [{"EventId": "E1"}]}]


def test_once_fails_when_the_approval_it_owed_could_not_be_sent(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    imds.server.faults.add(status=500, method="POST", times=10**6)
    result = run_cli("run", "--once", "--imds-url", imds.url, "--state-file", str(tmp_path / "s.json"),
                     "--retry-for", "1")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: approval of " + eid)
    assert imds.approved_ids() == []
    imds.server.faults.clear()
    again = run_cli("run", "--once", "--imds-url", imds.url, "--state-file", str(tmp_path / "s.json"))
    assert again.returncode == 0, again.stderr
    assert imds.approved_ids() == [eid]


@pytest.mark.parametrize("command", [["events"], ["approve", "E1"]])
def test_one_shot_commands_refuse_a_nan_retry_budget(imds: Imds, command: list) -> None:
    result = run_cli(*command, "--retry-for", "nan", "--imds-url", imds.url)
    assert result.returncode == 2 and result.stderr.startswith("error: invalid --retry-for"), result.stderr
    assert imds.server.log.count() == 0
