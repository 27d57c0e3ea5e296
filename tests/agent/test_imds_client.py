"""ImdsClient against the emulator: request hygiene, proxies, redirects, retries, rate limit."""

from __future__ import annotations

import json
import threading
import time
from typing import List

import pytest
from helpers import recording_clock
from inprocess import InProcessTransport

from vmss_terminate.agent.imds import (
    MAX_BODY_BYTES,
    ForeignEventError,
    ImdsClient,
    ImdsError,
    RateLimiter,
    Stopped,
    check_imds_api_version,
)
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response

from .conftest import VM, Imds, make_agent

RecordingClock = recording_clock


def client(imds: Imds, clock=None, **kwargs) -> ImdsClient:  # type: ignore[no-untyped-def]
    return ImdsClient(imds.url, clock=clock or RecordingClock(), read_timeout=kwargs.pop("read_timeout", 2.0),
                      first_call_timeout=kwargs.pop("first_call_timeout", 2.0), max_per_second=100, **kwargs)


def test_every_request_has_metadata_header_and_no_forwarded_for(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    c = client(imds)
    c._session.headers["X-Forwarded-For"] = "10.0.0.1"  # even if someone adds it, it never leaves
    assert c.vm_name() == VM
    assert c.get_events().get(eid) is not None
    c.approve(eid, VM)
    assert imds.server.log.wait_for(lambda r: len(r) >= 4, 5)  # the server logs after answering
    log = imds.server.log.all()
    assert [r.method for r in log] == ["GET", "GET", "GET", "POST"]  # the guard re-reads right before the POST
    for r in log:
        headers = {k.lower(): v for k, v in r.headers.items()}
        assert headers.get("metadata") == "true"
        assert "x-forwarded-for" not in headers
        assert r.status == 200
    assert json.loads(log[-1].body) == {"StartRequests": [{"EventId": eid}]}
    assert log[1].query["api-version"] == ["2019-01-01"]


def test_dead_proxy_in_environment_does_not_affect_imds(imds: Imds, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "")
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url)
    agent.run_once(retry_for=0)
    assert imds.approved_ids() == [eid]


def test_redirect_is_not_followed(imds: Imds) -> None:
    imds.server.faults.add(status=302, headers={"Location": "http://127.0.0.1:9/evil"}, times=5)
    c = client(imds)
    with pytest.raises(ImdsError) as info:
        c.get_events()
    assert info.value.status == 302 and not info.value.retryable
    assert imds.server.log.wait_for(lambda r: len(r) >= 1, 5)
    assert imds.server.log.count() == 1


@pytest.mark.parametrize("fault", [
    dict(status=500, times=3), dict(status=503, times=2), dict(status=410, times=4), dict(garbage=True, times=2),
    dict(status=200, body=b'{"DocumentIncarnation": 1}', times=2),  # JSON but not a document
])
def test_transient_failures_are_retried_with_growing_backoff(imds: Imds, fault: dict) -> None:
    imds.server.faults.add(path_contains="scheduledevents", **fault)
    clock = RecordingClock()
    doc = client(imds, clock).get_events()
    assert doc.events == ()
    assert imds.server.faults.pending() == 0
    assert len(clock.waits) == fault["times"]
    assert all(0 < w <= 10.0 for w in clock.waits)
    if len(clock.waits) >= 3:
        assert clock.waits[-1] > clock.waits[0]  # exponential, even with jitter (0.5..1.0)


def test_429_honours_retry_after(imds: Imds) -> None:
    imds.server.faults.add(status=429, headers={"Retry-After": "7"}, times=1)
    clock = RecordingClock()
    client(imds, clock).get_events()
    assert clock.waits and clock.waits[0] >= 7.0


def test_410_is_retried_for_at_most_70_seconds(imds: Imds) -> None:
    imds.server.faults.add(status=410, times=1000)
    clock = RecordingClock()
    started = clock.now()
    with pytest.raises(ImdsError) as info:
        client(imds, clock).get_events()
    assert info.value.status == 410
    assert 30 <= clock.now() - started <= 70.0


def test_timeout_is_retried(imds: Imds) -> None:
    imds.server.faults.add(delay=5.0, times=1, path_contains="scheduledevents")  # cut short at teardown
    clock = RecordingClock()
    c = client(imds, clock, read_timeout=1.0, first_call_timeout=1.0)
    assert c.get_events().events == ()
    assert len(clock.waits) == 1


def test_non_retryable_errors_are_raised_at_once(imds: Imds) -> None:
    imds.server.faults.add(status=404, times=1)
    with pytest.raises(ImdsError) as info:
        client(imds).get_events()
    assert info.value.status == 404 and not info.value.retryable


def test_client_stays_under_the_imds_rate_limit() -> None:
    group = PlacementGroup()
    app = ImdsEmulator(group, vm_name=VM, rate_limit=5.0)  # the real limit, in real time
    with EmulatorServer(app) as server:
        c = ImdsClient(server.url, first_call_timeout=2.0)  # default: 4 per second
        for _ in range(9):
            c.get_events(retry_for=0)
        assert server.log.wait_for(lambda r: len(r) >= 9, 5)
        assert all(r.status == 200 for r in server.log.all())


def test_rate_limiter_window() -> None:
    now = [0.0]
    slept: List[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    limiter = RateLimiter(limit=4, window=1.0, monotonic=lambda: now[0], sleep=sleep)
    for _ in range(4):
        limiter.acquire()
    assert slept == []
    limiter.acquire()
    assert slept and abs(sum(slept) - 1.0) < 1e-6


def test_guard_refuses_foreign_and_unknown_events_before_any_post(imds: Imds) -> None:
    mine = imds.group.add_event("Terminate", [VM])
    other = imds.group.add_event("Terminate", ["myvmss_30"])
    c = client(imds)
    with pytest.raises(ForeignEventError):
        c.approve(mine, VM)  # no document fetched yet: nothing is known to be ours
    c.get_events()
    with pytest.raises(ForeignEventError):
        c.approve(other, VM)
    with pytest.raises(ForeignEventError):
        c.approve("not-there", VM)
    assert imds.server.log.count("POST") == 0
    c.approve(mine, VM.upper())  # case-insensitive names
    assert imds.approved_ids() == [mine]


@pytest.mark.parametrize("version", ["2017-11-01", "2018-12-31", "newest", "2019-1-1"])
def test_old_or_bad_api_versions_are_refused(version: str) -> None:
    with pytest.raises(UsageError):
        check_imds_api_version(version)


def test_newer_api_version_is_used_on_the_wire(imds: Imds) -> None:
    imds.group.add_event("Terminate", [VM], description="scale-in")
    doc = ImdsClient(imds.url, api_version="2020-07-01", first_call_timeout=2.0).get_events()
    assert doc.events[0].description == "scale-in"
    assert imds.server.log.wait_for(lambda r: len(r) >= 1, 5)
    assert imds.server.log.all()[0].query["api-version"] == ["2020-07-01"]


def test_a_slow_drip_answer_is_cut_off_at_the_total_deadline(imds: Imds) -> None:
    imds.server.faults.add(drip=0.2, path_contains="scheduledevents", times=None)
    c = ImdsClient(imds.url, clock=RecordingClock(), connect_timeout=0.5, read_timeout=1.0, first_call_timeout=1.0,
                   max_per_second=100)
    began = time.monotonic()
    with pytest.raises(ImdsError, match=r"no complete answer within 1\.5s"):
        c.get_events(retry_for=0)
    assert time.monotonic() - began < 5  # a byte every 0.2 s of a ~40-byte answer; never a per-read timeout


def test_a_stop_signal_ends_a_request_in_flight(imds: Imds) -> None:
    imds.server.faults.add(drip=0.2, path_contains="scheduledevents", times=None)
    c = ImdsClient(imds.url, read_timeout=60.0, first_call_timeout=60.0, max_per_second=100)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    began = time.monotonic()
    with pytest.raises(Stopped):
        c.get_events(retry_for=None, stop=stop)
    assert time.monotonic() - began < 5


def test_an_oversize_answer_is_an_imds_fault_not_a_memory_hog(imds: Imds) -> None:
    imds.server.faults.add(pad=MAX_BODY_BYTES + 1, path_contains="scheduledevents")
    with pytest.raises(ImdsError, match="larger than"):
        client(imds).get_events(retry_for=0)
    assert client(imds).get_events(retry_for=0).events == ()  # an answer of normal size is read


def test_a_connection_reset_is_reported_as_a_reset_not_as_cannot_connect(imds: Imds) -> None:
    imds.server.faults.add(reset=True, path_contains="scheduledevents")
    with pytest.raises(ImdsError) as raised:
        client(imds).get_events(retry_for=0)
    assert "reset" in str(raised.value) and "cannot connect" not in str(raised.value)
    refused = ImdsClient("http://127.0.0.1:9", read_timeout=1.0, first_call_timeout=1.0)
    with pytest.raises(ImdsError, match="cannot connect"):
        refused.get_events(retry_for=0)


class Canned:
    """An IMDS that answers every request with one hand-written response."""

    def __init__(self, answer: Response) -> None:
        self.answer = answer

    def handle(self, request: Request) -> Response:
        return self.answer


def test_an_injected_transport_carries_every_request_and_the_guard_and_headers_hold(no_sockets: None) -> None:
    group = PlacementGroup(auto_start=False)
    transport = InProcessTransport(ImdsEmulator(group, vm_name=VM, rate_limit=None))
    c = ImdsClient("http://127.0.0.1:9", clock=RecordingClock(), max_per_second=100, transport=transport)
    c._session.headers["X-Forwarded-For"] = "10.0.0.1"  # even if someone adds it, it never leaves
    mine, other = group.add_event("Terminate", [VM]), group.add_event("Terminate", ["myvmss_30"])
    assert c.vm_name() == VM
    c.get_events()
    with pytest.raises(ForeignEventError):
        c.approve(other, VM)
    c.approve(mine, VM)
    assert [a.event_id for a in group.approvals if a.accepted] == [mine]
    log = transport.log.all()
    assert [r.method for r in log] == ["GET", "GET", "GET", "POST"]  # the guard re-reads right before the POST
    for r in log:
        headers = {k.lower(): v for k, v in r.headers.items()}
        assert headers.get("metadata") == "true" and "x-forwarded-for" not in headers


@pytest.mark.parametrize("answer, refusal", [
    (Response(302, b"", {"Location": "http://127.0.0.1:9/evil"}), "redirects are never followed"),
    (Response(200, b" " * (MAX_BODY_BYTES + 1), {"Content-Type": "application/json"}), "larger than"),
    (Response(200, b"[" * 100000, {"Content-Type": "application/json"}), "malformed answer"),
    (Response(0, reset=True), "connection reset"),
])
def test_the_clients_rules_hold_whatever_transport_carries_the_answer(no_sockets: None, answer: Response,
                                                                      refusal: str) -> None:
    transport = InProcessTransport(Canned(answer))
    c = ImdsClient("http://127.0.0.1:9", clock=RecordingClock(), max_per_second=100, transport=transport)
    with pytest.raises(ImdsError, match=refusal):
        c.get_events(retry_for=0)
    assert transport.log.count() == 1
