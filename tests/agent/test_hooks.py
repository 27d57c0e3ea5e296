"""Hooks: data via env/stdin never through a shell, ordering, types, deadlines, failure policy."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.hooks import HookContext
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.imds.events import format_not_before
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response

from .conftest import VM, Imds, Recorder, Running, make_agent, run_cli, wait_until

PROBE = Path(__file__).with_name("hook_probe.py")


def probe(out: Path, *extra: str) -> str:
    return " ".join(shlex.quote(p) for p in (sys.executable, str(PROBE), str(out), *extra))


def runs(out: Path) -> List[Dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"), key=lambda p: int(p.stem))]


def test_hook_gets_event_in_env_and_stdin(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")])
    agent.run_once(retry_for=0)
    (record,) = runs(tmp_path / "out")
    env = record["env"]
    assert env["VMSS_TERMINATE_EVENT_ID"] == eid
    assert env["VMSS_TERMINATE_EVENT_TYPE"] == "Terminate"
    assert env["VMSS_TERMINATE_VM_NAME"] == VM
    assert json.loads(env["VMSS_TERMINATE_RESOURCES"]) == [VM]
    assert env["VMSS_TERMINATE_NOT_BEFORE"].endswith("GMT")
    stdin = json.loads(record["stdin"])
    assert stdin["EventId"] == eid and stdin["Resources"] == [VM]
    assert imds.approved_ids() == [eid]


@pytest.mark.parametrize("evil", ["$(touch pwned)", "`touch pwned`", "x; touch pwned", "x' && touch pwned '"])
def test_event_data_never_reaches_a_shell(imds: Imds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          evil: str) -> None:
    monkeypatch.chdir(tmp_path)
    imds.group.add_event("Terminate", [VM], event_id=evil)
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")])
    agent.run_once(retry_for=0)
    (record,) = runs(tmp_path / "out")
    assert record["env"]["VMSS_TERMINATE_EVENT_ID"] == evil
    assert not (tmp_path / "pwned").exists()
    assert imds.approved_ids() == [evil]


def test_hooks_run_in_order_and_stop_at_the_first_failure(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "a"), probe(tmp_path / "b", "exit", "3"),
                                        probe(tmp_path / "c")])
    seen: List[str] = []
    agent.subscribe(lambda d: seen.append(d.kind))
    agent.run_once(retry_for=0)
    assert len(runs(tmp_path / "a")) == 1 and len(runs(tmp_path / "b")) == 1 and not runs(tmp_path / "c")
    assert seen.count("hook_finished") == 1 and seen.count("hook_failed") == 1
    assert imds.approved_ids() == [eid]  # default --on-hook-failure=approve


def test_on_hook_failure_wait_lets_the_event_expire(imds: Imds, tmp_path: Path) -> None:
    imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "a", "exit", "1")], on_hook_failure="wait")
    seen: List[str] = []
    agent.subscribe(lambda d: seen.append(d.kind))
    agent.run_once(retry_for=0)
    agent.run_once(retry_for=0)
    assert "approval_withheld" in seen and seen.count("approval_withheld") == 1
    assert imds.approved_ids() == [] and imds.server.log.count("POST") == 0


def test_hooks_are_for_own_terminate_only_unless_subscribed(imds: Imds, tmp_path: Path) -> None:
    term = imds.group.add_event("Terminate", [VM])
    freeze = imds.group.add_event("Freeze", [VM])
    other = imds.group.add_event("Terminate", ["myvmss_30"])
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "a")])
    kinds: Dict[str, List[str]] = {}
    agent.subscribe(lambda d: kinds.setdefault(d.event_id or "", []).append(d.kind))
    agent.run_once(retry_for=0)
    assert [r["env"]["VMSS_TERMINATE_EVENT_ID"] for r in runs(tmp_path / "a")] == [term]
    assert "observed" in kinds[freeze] and "not_ours" in kinds[other]
    assert imds.approved_ids() == [term]

    # subscribed and opted in: the Freeze hook runs and the Freeze is approved (still only ours)
    # (--hook-events names types besides Terminate: this fresh agent drains the Terminate too)
    agent2 = make_agent(imds.url, hooks=[probe(tmp_path / "b")], hook_events="Freeze", approve_types="Freeze")
    agent2.run_once(retry_for=0)
    assert sorted(r["env"]["VMSS_TERMINATE_EVENT_ID"] for r in runs(tmp_path / "b")) == sorted([term, freeze])
    assert set(imds.approved_ids()) == {term, freeze}  # a fresh agent re-approves term too: harmless, still ours


def test_shared_terminate_runs_hooks_but_is_not_approved_by_default(imds: Imds, tmp_path: Path) -> None:
    shared = imds.group.add_event("Terminate", [VM, "myvmss_4"])
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "a")])
    seen: List[str] = []
    agent.subscribe(lambda d: seen.append(d.kind))
    agent.run_once(retry_for=0)
    assert len(runs(tmp_path / "a")) == 1 and "shared_not_approved" in seen
    assert imds.approved_ids() == []
    make_agent(imds.url, approve_shared=True).run_once(retry_for=0)
    assert imds.approved_ids() == [shared]


class HeldClock(ManualClock):
    """Time that moves only when the test moves it (`advance`): the agent's waits pass in a few real
    milliseconds and return, so clock time passes neither while a hook process starts nor by any
    of the agent's threads (a ScaledClock made a loaded machine's slow process start a deadline)."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(min(max(seconds, 0.0), 0.005))


@contextlib.contextmanager
def _run_once(agent: Any) -> Iterator[threading.Thread]:
    """`agent.run_once(retry_for=0)` in a thread while the test moves the clock; on exit the agent is
    told to stop (it ends a hook the test left running) and joined, bounded."""
    stop = threading.Event()
    once = threading.Thread(target=agent.run_once, args=(stop,), kwargs={"retry_for": 0}, daemon=True)
    once.start()
    try:
        yield once
    finally:
        stop.set()
        once.join(30)
    assert not once.is_alive(), "run_once did not end"


@pytest.mark.parametrize("prefix", ["", "trap \"\" TERM; "], ids=["plain", "ignores-sigterm"])
def test_deadline_stops_a_long_hook_and_its_children(imds: Imds, tmp_path: Path, prefix: str) -> None:
    """On a held clock: the hook (and its child) run while time stands still, then the test moves
    the clock past the deadline (NotBefore - 3 s margin); no real deadline to race on a busy machine."""
    clock = HeldClock()
    group = PlacementGroup(clock=clock, auto_start=False)
    imds.server.reset(ImdsEmulator(group, vm_name=VM, rate_limit=None))
    pidfile = tmp_path / "child.pid"
    eid = group.add_event("Terminate", [VM], not_before=clock.now() + 7)
    hook = f"sh -c '{prefix}sleep 60 & echo $! > \"$0\"; wait' {shlex.quote(str(pidfile))}"
    agent = make_agent(imds.url, clock=clock, hooks=[hook], safety_margin=3.0)
    decisions = Recorder()
    agent.subscribe(decisions)
    with _run_once(agent) as once:
        assert wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 30), \
            "the hook never started"
        assert D.HOOK_FAILED not in decisions.kinds(eid)  # time stands still: the deadline is 3..4 s away
        clock.advance(5)  # past NotBefore - 3 s
        assert decisions.wait_kind(D.HOOK_FAILED, eid, timeout=30)
        assert decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
        once.join(30)
    failed = next(d for d in decisions.items if d.kind == D.HOOK_FAILED)
    assert failed.data["outcome"] == "deadline"
    child = int(pidfile.read_text())
    assert wait_until(lambda: not _alive(child), 5), "the hook's child survived"


def _alive(pid: int) -> bool:
    """Running; a zombie (exited, not yet reaped: in a container whose PID 1 does not reap orphans
    it stays one) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): kill(0) is all we know
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_python_handlers_and_failure(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    calls: List[Any] = []

    def drain(event: Any, ctx: HookContext) -> None:
        calls.append((event.event_id, ctx.vm_name, ctx.seconds_left() is not None))

    def broken(event: Any, ctx: HookContext) -> None:
        raise RuntimeError("boom")

    agent = make_agent(imds.url)
    agent.on("Terminate", drain)
    agent.on("Reboot", broken)  # not a Terminate: never called
    agent.run_once(retry_for=0)
    assert calls == [(eid, VM, True)]
    assert imds.approved_ids() == [eid]

    second = imds.group.add_event("Terminate", [VM])
    agent2 = make_agent(imds.url)
    agent2.on("*", broken)
    seen: List[Any] = []
    agent2.subscribe(seen.append)
    agent2.run_once(retry_for=0)
    assert any(d.kind == "hook_failed" and "boom" in d.message for d in seen)
    assert second in imds.approved_ids()


class _Hooked:
    def __init__(self) -> None:
        self.bodies: List[Any] = []

    def handle(self, request: Request) -> Response:
        self.bodies.append(request.json())
        return Response.json(200, {})


def test_webhook_gets_the_event(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    app = _Hooked()
    with EmulatorServer(app) as hook_server:
        agent = make_agent(imds.url, webhook=hook_server.url + "/drain?token=secret")
        seen: List[str] = []
        agent.subscribe(lambda d: seen.append(d.message))
        agent.run_once(retry_for=0)
    assert app.bodies[0]["event"]["EventId"] == eid and app.bodies[0]["vm_name"] == VM
    assert imds.approved_ids() == [eid]
    assert not any("secret" in m for m in seen)  # a token in the URL never reaches the log


def test_hook_arguments_never_reach_logs_or_state(imds: Imds, tmp_path: Path) -> None:
    imds.group.add_event("Terminate", [VM])
    state = tmp_path / "state.json"
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "a", "exit", "0", "--token=s3cret")], state_file=str(state))
    seen: List[Any] = []
    agent.subscribe(seen.append)
    agent.run_once(retry_for=0)
    assert runs(tmp_path / "a") and any(d.kind == "hook_finished" for d in seen)
    assert not any("s3cret" in d.message or "s3cret" in json.dumps(d.data) for d in seen)
    assert "s3cret" not in state.read_text()


def test_event_vanishing_while_hook_runs_is_not_approved(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    out = tmp_path / "a"
    agent = make_agent(imds.url, hooks=[probe(out, "block")])
    with Running(agent) as running:
        assert wait_until(lambda: len(runs(out)) == 1)
        imds.group.remove_event(eid)
        assert running.decisions.wait_kind("event_gone", eid)
        (out / "release").write_text("go")
        assert running.decisions.wait_kind("hook_finished", eid)
    assert imds.server.log.count("POST") == 0


@pytest.mark.parametrize("event_id", ["abc\x00def", "abc\ud800def"])
def test_event_data_a_hook_cannot_receive_is_neither_drained_nor_approved(imds: Imds, tmp_path: Path,
                                                                          event_id: str) -> None:
    imds.group.add_event("Terminate", [VM], event_id=event_id)
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")])
    decisions: List[Any] = []
    agent.subscribe(decisions.append)
    agent.run_once(retry_for=0)
    assert runs(tmp_path / "out") == [] and imds.approved_ids() == []
    (failed,) = [d for d in decisions if d.kind == "hook_failed"]
    assert "VMSS_TERMINATE_EVENT_ID" in failed.message and "not approving" in failed.message


def test_a_not_before_a_hook_cannot_receive_blocks_the_approval_too() -> None:
    from vmss_terminate.agent.config import AgentConfig
    from vmss_terminate.pipeline import policy
    from vmss_terminate.pipeline.events import Event

    config = AgentConfig(imds_url="http://127.0.0.1:1", hooks=[f"{sys.executable} -c pass"]).validated()
    event = Event.from_json({"EventId": "e", "EventType": "Terminate", "Resources": [VM],
                             "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47\x00 GMT"})
    verdict = policy.next_step(event, VM, config, policy.Progress(), has_hooks=True)
    assert verdict.action == policy.WITHHOLD and "VMSS_TERMINATE_NOT_BEFORE" in verdict.message
    failed_hook = policy.Progress(hooks_started=True, hooks_finished=True, hooks_failed=True)
    assert policy.next_step(event, VM, config, failed_hook, has_hooks=True).action == policy.APPROVE


def test_a_webhook_answer_that_trickles_in_does_not_hold_the_drain(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    app = _Hooked()
    with EmulatorServer(app) as hook_server:
        hook_server.faults.add(drip=1.0, pad=60, times=None)  # a 60-byte answer at a byte a second
        agent = make_agent(imds.url, webhook=hook_server.url + "/drain")
        began = time.monotonic()
        agent.run_once(retry_for=0)
        took = time.monotonic() - began
        hook_server.faults.clear()
    assert imds.approved_ids() == [eid] and took < 20


def test_a_stop_abandons_a_webhook_that_does_not_answer(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    with EmulatorServer(_Hooked()) as hook_server:
        hook_server.faults.add(delay=60, times=None)
        agent = make_agent(imds.url, webhook=hook_server.url + "/drain")
        with Running(agent) as running:
            assert running.decisions.wait_kind("hook_started", eid)
            began = time.monotonic()
        stopped_in = time.monotonic() - began
        hook_server.faults.clear()
    assert stopped_in < 5  # not the webhook's 10 s read timeout
    assert "cancelled" in [d.data.get("outcome") for d in running.decisions.items if d.kind == "hook_failed"]


@pytest.mark.parametrize("not_before", ["Mon, 01 Jan 0001 00:00:00 GMT", "past"], ids=["year-0001", "clock-ahead"])
def test_a_past_not_before_still_runs_the_hooks_before_the_approval(imds: Imds, tmp_path: Path,
                                                                    not_before: str) -> None:
    # The reviewer's reproduction: the default --on-hook-failure approve used to approve at once
    # ("hook not started: too late"), the hook having run 0 times.
    value = format_not_before(time.time() - 3600) if not_before == "past" else not_before
    eid = imds.group.add_event("Terminate", [VM], not_before=value)
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")])
    agent.run_once(retry_for=0)
    (record,) = runs(tmp_path / "out")
    assert record["env"]["VMSS_TERMINATE_EVENT_ID"] == eid
    assert imds.approved_ids() == [eid]


def test_hook_events_reboot_still_runs_the_hooks_for_terminate(imds: Imds, tmp_path: Path) -> None:
    # The reviewer's reproduction: `--hook X --hook-events Reboot` used to give Terminate no hook and
    # approve it at once, undrained. --hook-events names types *besides* Terminate, as --approve does.
    term = imds.group.add_event("Terminate", [VM])
    result = run_cli("run", "--once", "--hook", probe(tmp_path / "out"), "--hook-events", "Reboot",
                     "--imds-url", imds.url, "--state-file", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    assert [r["env"]["VMSS_TERMINATE_EVENT_ID"] for r in runs(tmp_path / "out")] == [term]
    assert imds.approved_ids() == [term]


def test_hook_not_started_too_late_names_the_event_in_its_message(imds: Imds, tmp_path: Path) -> None:
    # NotBefore is believable (ahead) but within the safety margin: too late to start the hook
    eid = imds.group.add_event("Terminate", [VM], not_before=format_not_before(time.time() + 10))
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")], safety_margin=60.0)
    seen: List[Any] = []
    agent.subscribe(seen.append)
    agent.run_once(retry_for=0)
    (failed,) = [d for d in seen if d.kind == "hook_failed"]
    assert "not started" in failed.message and eid in failed.message and "Terminate" in failed.message
    assert runs(tmp_path / "out") == []


def test_the_assumed_window_for_an_unreadable_not_before_counts_from_the_first_hook(imds: Imds, tmp_path: Path) -> None:
    # An unbelievable NotBefore gives the hooks one assumed 15-minute window from when they began,
    # not a fresh window per hook: after a first hook of 10 agent minutes, a second one of 10 minutes
    # is stopped at the shared deadline (15 min - 15 s margin), and a third never starts. The hooks
    # block until released; the test moves the clock while they run.
    imds.group.add_event("Terminate", [VM], not_before="Mon, 01 Jan 0001 00:00:00 GMT")
    clock = HeldClock()
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    agent = make_agent(imds.url, clock=clock, vm_name=VM,
                       hooks=[probe(first, "block"), probe(second, "block"), probe(third)])
    seen: List[Any] = []
    agent.subscribe(seen.append)
    try:
        with _run_once(agent) as once:
            assert wait_until(lambda: runs(first), 30), "the first hook never started"
            clock.advance(600)  # the first hook takes 10 minutes
            (first / "release").write_text("go")
            assert wait_until(lambda: runs(second), 30), "the second hook never started"
            clock.advance(600)  # the second 10 more: past the window's end, 885 s after the first began
            once.join(30)
    finally:
        second.mkdir(exist_ok=True)
        (second / "release").write_text("go")  # an agent that left it running: end it
    assert len([d for d in seen if d.kind == "hook_started"]) == 2
    failed = [d.message for d in seen if d.kind == "hook_failed"]
    assert any("hook#2" in m and "deadline" in m for m in failed), failed
    assert runs(third) == []
