"""`--listen`: /metrics scraped over real HTTP and parsed with Prometheus' own text parser; /healthz;
/readyz (the drain probe) turns 503 before the approval; `--drain-delay` and its NotBefore bound,
with the injectable clock and against the IMDS emulator."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from vmss_terminate.agent import Agent
from vmss_terminate.agent.probes import serve
from vmss_terminate.clock import ManualClock
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.probes import ProbeServer, parse_listen
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup

from .conftest import VM, Imds, Recorder, Running, make_agent
from .test_hooks import probe, runs


def get(server: ProbeServer, path: str) -> requests.Response:
    session = requests.Session()
    session.trust_env = False
    return session.get(server.url + path, timeout=5)


def scrape(server: ProbeServer) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """Every sample of /metrics by (sample name, sorted labels), via prometheus_client's parser."""
    response = get(server, "/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.mark.parametrize("value, expected", [
    ("9100", ("127.0.0.1", 9100)), (":9100", ("127.0.0.1", 9100)), ("0.0.0.0:9100", ("0.0.0.0", 9100)),
    ("10.0.0.4:80", ("10.0.0.4", 80)), ("[::1]:9100", ("::1", 9100)), ("localhost:0", ("localhost", 0)),
    ("[10.0.0.4]:9102", ("10.0.0.4", 9102)), ("[fd00:10:244::4]:9102", ("fd00:10:244::4", 9102)),
])
def test_listen_address_defaults_to_loopback(value: str, expected: Tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize("value", ["", "host", "1.2.3.4:", "1.2.3.4:99999", "::1:9100", "a b:1", "[host]:1",
                                   "[1.2.3]:80", "[::1::2]:80", "[::1]", "[10.0.0.4]"])
def test_bad_listen_address_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError):
        parse_listen(value)


def test_an_unbracketed_ipv6_address_is_refused_with_the_bracketed_form() -> None:
    """`fd00::1:9102` is never guessed at (the port could be the address's last group)."""
    with pytest.raises(UsageError, match="an IPv6 address goes in brackets"):
        parse_listen("fd00::1:9102")


@pytest.mark.parametrize("listen", ["[127.0.0.1]:0", "[::1]:0"])
def test_a_bracketed_address_of_either_family_serves(imds: Imds, listen: str) -> None:
    """What the Kubernetes DaemonSet's `--listen [$(POD_IP)]:9102` becomes on an IPv4 or an IPv6 node."""
    server = serve(make_agent(imds.url), listen)
    try:
        assert server.url.startswith(("http://127.0.0.1:", "http://[::1]:"))
        assert get(server, "/healthz").status_code == 503  # answered; the agent is not running
    finally:
        server.close()


def test_metrics_are_real_prometheus_text(imds: Imds, tmp_path: Path) -> None:
    own = imds.group.add_event("Terminate", [VM], event_source="User", duration_in_seconds=-1)
    imds.group.add_event("Reboot", ["other_1"])
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")], api_version="2020-07-01")
    server = serve(agent, "127.0.0.1:0")
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.APPROVAL_SENT, own)
            samples = scrape(server)
    finally:
        server.close()
    info = [labels for (name, labels) in samples if name == "vmss_terminate_agent_info"]
    assert dict(info[0])["vm_name"] == VM and dict(info[0])["api_version"] == "2020-07-01"
    seen = {dict(labels)["owner"] + ":" + dict(labels)["event_type"]: value
            for (name, labels), value in samples.items() if name == "vmss_terminate_events_seen_total"}
    assert seen == {"own:Terminate": 1.0, "foreign:Reboot": 1.0}
    assert samples[("vmss_terminate_events_seen_total",
                    (("event_source", "User"), ("event_type", "Terminate"), ("owner", "own")))] == 1.0
    assert samples[("vmss_terminate_hooks_run_total", ())] == 1.0
    assert samples[("vmss_terminate_hook_duration_seconds_count", ())] == 1.0
    assert samples[("vmss_terminate_approvals_sent_total", (("event_type", "Terminate"),))] == 1.0
    ok_polls = samples[("vmss_terminate_imds_requests_total",
                        (("endpoint", "scheduledevents"), ("method", "GET"), ("outcome", "ok")))]
    assert ok_polls >= 1
    assert samples[("vmss_terminate_imds_requests_total",
                    (("endpoint", "scheduledevents"), ("method", "POST"), ("outcome", "ok")))] == 1.0
    assert samples[("vmss_terminate_last_successful_poll_timestamp_seconds", ())] > 1_600_000_000
    assert samples[("vmss_terminate_draining", ())] == 1.0 and samples[("vmss_terminate_healthy", ())] == 1.0


def test_seconds_to_not_before_of_the_own_pending_event(imds: Imds) -> None:
    clock = ManualClock()
    app = ImdsEmulator(PlacementGroup(clock=clock, auto_start=False), vm_name=VM, rate_limit=None)
    imds.server.reset(app)
    eid = app.group.add_event("Reboot", [VM], not_before=clock.now() + 600, duration_in_seconds=30)
    # Reboot: observed, never approved
    agent = make_agent(imds.url, clock=clock, api_version="2020-07-01", vm_name=VM)
    server = serve(agent, "127.0.0.1:0")
    try:
        agent.poll()
        samples = scrape(server)
    finally:
        server.close()
    labels = (("event_id", eid), ("event_type", "Reboot"))
    assert 590 <= samples[("vmss_terminate_not_before_seconds", labels)] <= 600
    assert samples[("vmss_terminate_event_duration_seconds", labels)] == 30.0


def test_healthz_says_why_it_fails() -> None:
    clock = ManualClock()
    agent = make_agent("http://127.0.0.1:9", clock=clock)  # nothing listens: IMDS never answers
    server = serve(agent, "127.0.0.1:0")
    try:
        not_running = get(server, "/healthz")
        assert not_running.status_code == 503 and "not running" in not_running.text
        failing = Recorder()
        agent.subscribe(failing)
        with Running(agent):
            # ManualClock: every retry wait moves time on, so "no answer for > 60 s" comes at once
            assert failing.wait_for(lambda items: clock.now() - agent.started_at > 120 and
                                    sum(d.kind == D.IMDS_ERROR for d in items) >= 2)
            answer = get(server, "/healthz")
        assert answer.status_code == 503
        assert "no answer from IMDS since the agent started" in answer.text and "cannot connect" in answer.text
        assert get(server, "/nope").status_code == 404
    finally:
        server.close()


def test_healthz_is_200_while_polling(imds: Imds) -> None:
    agent = make_agent(imds.url)
    server = serve(agent, "127.0.0.1:0")
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.VM_NAME)
            assert imds.server.log.wait_for(lambda r: sum("scheduledevents" in x.path for x in r) >= 2, 10)
            healthy = get(server, "/healthz")
            ready = get(server, "/readyz")
    finally:
        server.close()
    assert (healthy.status_code, healthy.text) == (200, "ok\n")
    assert (ready.status_code, ready.text) == (200, "ok\n")


def test_readyz_turns_503_before_the_approval_over_real_http(imds: Imds, tmp_path: Path) -> None:
    """The order a load balancer needs: 503 first, then (drain delay later) the approval."""
    out = tmp_path / "out"
    out.mkdir()
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, hooks=[probe(out, "block")], drain_delay=0.5)
    server = serve(agent, "127.0.0.1:0")
    answers: List[int] = []
    agent.subscribe(lambda d: answers.append(get(server, "/readyz").status_code)
                    if d.kind == D.APPROVAL_SENT else None)
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.HOOK_STARTED, eid)
            draining = get(server, "/readyz")
            assert draining.status_code == 503 and f"Terminate {eid}" in draining.text
            assert imds.approved_ids() == []  # the hook still drains: nothing approved yet
            (out / "release").write_text("go")
            assert running.decisions.wait_kind(D.APPROVAL_SENT, eid)
            items = list(running.decisions.items)
    finally:
        server.close()
    drain = next(d for d in items if d.kind == D.DRAIN_STARTED)
    approval = next(d for d in items if d.kind == D.APPROVAL_SENT)
    assert items.index(drain) < items.index(approval)
    assert approval.at - drain.at >= 0.5 and approval.data["drain_seconds"] >= 0.5
    assert imds.group.approvals[0].at >= drain.at + 0.5  # the emulator got the POST after the delay
    assert answers == [503]


class DelayClock(ManualClock):
    """Time for the drain delay, independent of the machine's speed: it stands still (the agent's waits
    pass in a few real milliseconds) until `release()`, and from then on only the event's job thread
    moves it, by exactly what that thread waits for -- the drain delay's own waits. So clock time
    passes neither while a hook process starts and runs (a ScaledClock(60) made each real second a
    minute: a loaded machine's slow Python start-up broke the bounds) nor by other threads' waits."""

    def __init__(self) -> None:
        super().__init__()
        self.flowing = threading.Event()

    def release(self) -> None:
        self.flowing.set()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if self.flowing.is_set() and threading.current_thread().name.startswith("hooks:"):
            return super().wait(event, seconds)
        return event.wait(min(max(seconds, 0.0), 0.005))


def _held(imds: Imds) -> Tuple[DelayClock, PlacementGroup]:
    """Agent and emulator on one DelayClock."""
    clock = DelayClock()
    group = PlacementGroup(clock=clock, auto_start=False)
    imds.server.reset(ImdsEmulator(group, vm_name=VM, rate_limit=None))
    return clock, group


def _run_once(agent: Agent) -> None:
    """`agent.run_once(retry_for=0)`, bounded: an agent that waits for time that never comes (e.g. a hook
    held back until the delay passed, on a clock that stands still while hooks run) fails the test
    instead of hanging it."""
    failure: List[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        try:
            agent.run_once(stop, retry_for=0)
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        stop.set()
        thread.join(15)
        pytest.fail("run_once did not end: the agent waited for clock time that never passed")
    if failure:
        raise failure[0]


def _decisions(items: Iterator[Decision]) -> Dict[str, Decision]:
    """The first decision of each kind."""
    first: Dict[str, Decision] = {}
    for decision in items:
        first.setdefault(decision.kind, decision)
    return first


def test_drain_delay_holds_the_approval_while_hooks_run_in_parallel(imds: Imds, tmp_path: Path) -> None:
    clock, group = _held(imds)
    eid = group.add_event("Terminate", [VM], not_before=clock.now() + 300)
    agent = make_agent(imds.url, clock=clock, hooks=[probe(tmp_path / "out")], drain_delay=60)
    recorder = Recorder()
    agent.subscribe(recorder)
    # time stands still until the hook has finished: a hook held back by the delay never starts
    agent.subscribe(lambda d: clock.release() if d.kind == D.HOOK_FINISHED else None)
    _run_once(agent)
    kinds = _decisions(iter(recorder.items))
    drain, started, approved = kinds[D.DRAIN_STARTED], kinds[D.HOOK_STARTED], kinds[D.APPROVAL_SENT]
    assert started.at - drain.at < 15  # the hook did not wait for the delay
    assert approved.at >= drain.at + 60  # the approval did
    assert approved.at <= drain.at + 90
    assert [a.event_id for a in group.approvals] == [eid] and group.approvals[0].at >= drain.at + 60
    assert len(runs(tmp_path / "out")) == 1


def test_drain_delay_is_bounded_by_not_before_minus_safety_margin(imds: Imds) -> None:
    clock, group = _held(imds)
    clock.release()  # no hooks: only the delay's waits move time
    not_before = clock.now() + 100
    eid = group.add_event("Terminate", [VM], not_before=not_before)
    agent = make_agent(imds.url, clock=clock, drain_delay=600, safety_margin=15)  # no hooks: only the delay
    recorder = Recorder()
    agent.subscribe(recorder)
    _run_once(agent)
    approved = _decisions(iter(recorder.items))[D.APPROVAL_SENT]
    deadline = int(not_before) - 15  # NotBefore travels as whole seconds (RFC 1123)
    assert deadline <= approved.at < not_before
    assert [a.event_id for a in group.approvals] == [eid]
    assert group.approvals[0].at < not_before


def test_drain_start_survives_a_restart(imds: Imds, tmp_path: Path) -> None:
    """A new agent does not restart the delay: the journal keeps when the drain began."""
    clock, group = _held(imds)
    clock.release()
    eid = group.add_event("Terminate", [VM], not_before=clock.now() + 300)
    state = str(tmp_path / "state.json")
    first = make_agent(imds.url, clock=clock, state_file=state, drain_delay=60, approve_types="none")
    _run_once(first)  # sees it, drains, approves nothing (observe only)
    began = first.state.get(eid)["drain_started"]
    clock.advance(40)  # the agent restarts 40 s later: a delay restarted then would approve at began + 100
    second = make_agent(imds.url, clock=clock, state_file=state, drain_delay=60)
    recorder = Recorder()
    second.subscribe(recorder)
    _run_once(second)
    kinds = _decisions(iter(recorder.items))
    assert kinds[D.DRAIN_STARTED].data["since"] == began
    assert kinds[D.DRAIN_STARTED].at > began  # a new sighting, the old start
    assert began + 60 <= kinds[D.APPROVAL_SENT].at <= began + 90


def test_readyz_returns_to_200_when_a_reboot_drain_ends(imds: Imds) -> None:
    """Subscribed Reboot: drained while pending; back in rotation once it left the document."""
    eid = imds.group.add_event("Reboot", [VM])
    agent = make_agent(imds.url, hook_events="Reboot", approve_types="none")
    server = serve(agent, "127.0.0.1:0")
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.DRAIN_STARTED, eid)
            assert get(server, "/readyz").status_code == 503
            imds.group.remove_event(eid)
            assert running.decisions.wait_kind(D.DRAIN_ENDED, eid)
            assert get(server, "/readyz").status_code == 200
    finally:
        server.close()


def test_an_approved_terminate_keeps_readyz_503_after_it_left(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url)
    server = serve(agent, "127.0.0.1:0")
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.APPROVAL_SENT, eid)
            imds.group.remove_event(eid)
            assert running.decisions.wait_kind(D.EVENT_GONE, eid)
            assert get(server, "/readyz").status_code == 503
            assert D.DRAIN_ENDED not in running.decisions.kinds(eid)
    finally:
        server.close()


def test_probe_thread_and_agent_share_nothing_but_decisions() -> None:
    """The probe module is agent-side only: no emulator, control or azure import."""
    import subprocess
    import sys

    code = ("import sys, vmss_terminate.agent.probes, vmss_terminate.pipeline.notify\n"
            "print(sorted(m for m in sys.modules if m.startswith(('azure', 'vmss_terminate_sim.emulator', "
            "'vmss_terminate.control', 'prometheus_client'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr
