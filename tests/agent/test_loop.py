"""The poll loop: survives IMDS trouble, follows changes, runs on a scaled clock in threads; state."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, List

import pytest

from vmss_terminate.agent import Agent, AgentConfig, StateStore
from vmss_terminate.clock import ManualClock, ScaledClock
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.journal import resolve_state_file
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer

from .conftest import VM, Imds, Recorder, Running, make_agent


def test_loop_survives_every_kind_of_imds_trouble(imds: Imds) -> None:
    faults = imds.server.faults
    faults.add(status=500, times=2, path_contains="scheduledevents")
    faults.add(status=429, headers={"Retry-After": "0"}, times=2)
    faults.add(status=410, times=2)
    faults.add(garbage=True, times=2)
    faults.add(status=404, times=1, path_contains="scheduledevents")  # non-retryable: the loop goes on
    faults.add(delay=2.5, times=1, path_contains="scheduledevents")   # longer than the read timeout
    agent = make_agent(imds.url, request_timeout=0.5, first_call_timeout=0.5)
    agent.outage.backoff.cap = 0.1  # keep the test fast; the default caps at 30 s
    agent.client.backoff_cap = 0.1
    with Running(agent) as running:
        assert running.decisions.wait_kind("imds_recovered", timeout=15)
        eid = imds.group.add_event("Terminate", [VM])
        assert running.decisions.wait_kind("approval_sent", eid, timeout=15)
    assert "imds_error" in running.decisions.kinds()
    assert imds.server.faults.pending() == 0
    for request in imds.server.log.all():  # every request of a whole run, retries included
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert headers.get("metadata") == "true" and "x-forwarded-for" not in headers


def test_started_and_changed_events_are_followed(imds: Imds) -> None:
    agent = make_agent(imds.url, approve_types="none")
    eid = imds.group.add_event("Terminate", [VM])
    with Running(agent) as running:
        assert running.decisions.wait_kind("observed", eid)
        imds.group.start_event(eid)
        assert running.decisions.wait_kind("event_started", eid)
        imds.group.remove_event(eid)
        assert running.decisions.wait_kind("event_gone", eid)


def test_runs_in_threads_on_a_scaled_clock_with_subscribers() -> None:
    clock = ScaledClock(speed=20)
    group = PlacementGroup(clock=clock)  # auto_start: an approval starts the event
    names = ["myvmss_0", "myvmss_1", "myvmss_2"]
    servers = [EmulatorServer(ImdsEmulator(group, vm_name=n, rate_limit=None)).start() for n in names]
    decisions = Recorder()
    stop = threading.Event()
    threads = []
    try:
        for server in servers:
            agent = Agent(AgentConfig(imds_url=server.url, state_file=":memory:", poll_interval=1.0,
                                      max_requests_per_second=100, first_call_timeout=2), clock=clock)
            agent.subscribe(decisions)
            threads.append(threading.Thread(target=agent.run, args=(stop,), daemon=True))
        for t in threads:
            t.start()
        eid = group.add_event("Terminate", ["myvmss_1"])
        assert group.wait_for(lambda: len(group.approvals) >= 1, 10)
        assert decisions.wait_for(lambda items: {d.vm_name for d in items if d.kind == "not_ours"
                                                 and d.event_id == eid} == {"myvmss_0", "myvmss_2"}, 10)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for server in servers:
            server.stop()
    assert [(a.event_id, a.vm_name) for a in group.approvals] == [(eid, "myvmss_1")]


def test_state_file_is_private_atomic_and_pruned(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = StateStore(str(path))
    store.update("A", hooks_started=1.0)
    store.update("B", approved=2.0)
    if os.name != "nt":
        assert (path.stat().st_mode & 0o777) == 0o600
    assert StateStore(str(path)).get("A") == {"hooks_started": 1.0}
    assert store.prune(["B"]) == ["A"]
    assert json.loads(path.read_text())["events"] == {"B": {"approved": 2.0}}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp files left behind


def test_corrupt_state_file_does_not_stop_the_agent(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    assert StateStore(str(path)).event_ids() == []


def test_unwritable_default_state_dir_falls_back_per_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vmss_terminate.pipeline import journal as state

    blocker = tmp_path / "a-file"  # a directory cannot be created under a file, even by root
    blocker.write_text("")
    monkeypatch.setattr(state, "default_state_file", lambda: blocker / "sub" / "state.json")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "xdg"))
    assert resolve_state_file(None) == str(tmp_path / "xdg" / "vmss-terminate" / "state.json")
    with pytest.raises(UsageError):
        resolve_state_file(str(blocker / "sub" / "state.json"))  # an explicit path is never replaced


def test_restart_does_not_rerun_finished_hooks_and_prunes_gone_events(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    path = tmp_path / "state.json"
    StateStore(str(path)).update("gone-event", approved=1.0)
    StateStore(str(path)).update(eid, hooks_started=1.0, steps_done=["python:never#0"])
    calls: List[str] = []
    agent = make_agent(imds.url, state_file=str(path))

    def never(event, ctx):  # type: ignore[no-untyped-def]
        calls.append(event.event_id)

    never.__qualname__ = "never"
    agent.on("Terminate", never)
    agent.run_once(retry_for=0)
    assert calls == [] and imds.approved_ids() == [eid]
    assert set(json.loads(path.read_text())["events"]) == {eid}


def test_interrupted_hook_is_rerun_unless_disabled(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    calls: List[str] = []

    def drain(event, ctx):  # type: ignore[no-untyped-def]
        calls.append(event.event_id)

    for rerun, expected_calls in ((False, 0), (True, 1)):
        path = tmp_path / f"state-{rerun}.json"
        StateStore(str(path)).update(eid, hooks_started=1.0, current_step="python:drain#0")  # died mid-hook
        agent = make_agent(imds.url, state_file=str(path), rerun_interrupted=rerun)
        agent.on("Terminate", drain)
        kinds: List[str] = []
        agent.subscribe(lambda d, kinds=kinds: kinds.append(d.kind))
        agent.run_once(retry_for=0)
        assert len(calls) == expected_calls
        assert ("hook_rerun" in kinds) is rerun and ("hook_failed" in kinds) is not rerun
        assert "approval_sent" in kinds  # default --on-hook-failure=approve


def test_idle_polls_do_not_rewrite_the_state_file(imds: Imds, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The agent polls every second: once an event is handled, polling must not touch the disk.
    writes: List[int] = []
    real_write = StateStore._write
    monkeypatch.setattr(StateStore, "_write", lambda self: (writes.append(1), real_write(self))[1])
    imds.group.add_event("Terminate", ["myvmss_30"])
    imds.group.add_event("Terminate", [VM, "myvmss_30"])  # ours but shared: withheld
    mine = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, state_file=str(tmp_path / "state.json"))
    agent.run_once(retry_for=0)
    assert imds.approved_ids() == [mine] and writes
    writes.clear()
    for _ in range(10):
        agent.poll(retry_for=0)
    assert writes == []


def test_an_imds_outage_is_logged_at_its_start_while_it_lasts_and_at_its_end(imds: Imds) -> None:
    imds.server.faults.add(status=503, path_contains="scheduledevents", times=40)
    clock = ManualClock()
    agent = make_agent(imds.url, clock=clock, vm_name=VM)
    with Running(agent) as running:
        assert running.decisions.wait_kind("imds_recovered", timeout=30)
    outage = [d for d in running.decisions.items if d.kind in ("imds_error", "imds_recovered")]
    assert outage[0].message.startswith("IMDS unavailable: 503")
    assert any("still unavailable after" in d.message for d in outage[1:-1])
    assert len(outage) < 10  # 40 failures, a handful of lines
    end = outage[-1]
    assert end.kind == "imds_recovered" and end.data["failures"] == 40
    assert end.data["outage_seconds"] > 60 and f"after a {end.data['outage_seconds']:.1f}s outage" in end.message


def test_changed_hooks_after_a_restart_are_said_and_the_current_list_runs(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    path = tmp_path / "state.json"
    StateStore(str(path)).update(eid, hooks_started=1.0, current_step="hook#1:./slow.sh",
                                 hooks=["hook#1:./slow.sh"], event_type="Terminate")
    agent = make_agent(imds.url, state_file=str(path), hooks=[f"{sys.executable} -c pass"])
    decisions: List[Any] = []
    agent.subscribe(decisions.append)
    agent.run_once(retry_for=0)
    kinds = [d.kind for d in decisions if d.event_id == eid]
    assert "hooks_changed" in kinds and "hook_finished" in kinds and imds.approved_ids() == [eid]
    rerun = next(d for d in decisions if d.kind == "hook_rerun")
    assert "no longer configured" in rerun.message
    assert json.loads(path.read_text())["events"][eid]["hooks"] == [f"hook#1:{sys.executable}"]


def test_stop_lets_a_running_hook_finish_within_the_grace_and_approves(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    release = threading.Event()
    agent = make_agent(imds.url, stop_grace=30.0)
    agent.on("Terminate", lambda event, ctx: release.wait(20))
    with Running(agent) as running:
        assert running.decisions.wait_kind("hook_started", eid)
        running.stop.set()
        assert running.decisions.wait_kind("stopping")
        release.set()
    assert imds.approved_ids() == [eid]
    assert "hook_finished" in running.decisions.kinds(eid)


def test_an_explicit_state_file_creates_only_its_own_directory(tmp_path: Path) -> None:
    """Issue 28 item 10: --state-file /nonexistent/d/s.json created the whole tree (as root)."""
    with pytest.raises(UsageError, match=re.escape(f"{tmp_path / 'missing'} does not exist")):
        resolve_state_file(str(tmp_path / "missing" / "d" / "s.json"))
    assert not (tmp_path / "missing").exists()
    assert resolve_state_file(str(tmp_path / "d" / "s.json")) == str(tmp_path / "d" / "s.json")
    assert (tmp_path / "d").is_dir()
