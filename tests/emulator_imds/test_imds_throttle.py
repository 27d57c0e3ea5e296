"""Rate limit (429), the slow first Scheduled Events call, and server fault injection on IMDS."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest
import requests

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.imds.ratelimit import FirstCallGate, SlidingWindowLimiter

pytestmark = pytest.mark.timeout(30)

EVENTS = "/metadata/scheduledevents"
Q = {"api-version": "2019-01-01"}


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_sixth_request_within_the_window_is_429(group, serve, imds) -> None:
    # A long window keeps the test independent of machine speed; the 1 s default is tested below.
    server = serve(ImdsEmulator(group, "myvmss_3", rate_limit=5, rate_window=60.0))
    codes = [imds.get(server, EVENTS, Q).status_code for _ in range(7)]
    assert codes == [200] * 5 + [429, 429]
    # instance metadata shares the same per-VM budget
    assert imds.get(server, "/metadata/instance", {"api-version": "2021-02-01"}).status_code == 429


def test_rate_limit_is_per_vm(group, serve, imds) -> None:
    a = serve(ImdsEmulator(group, "myvmss_0", rate_limit=2, rate_window=60.0))
    b = serve(ImdsEmulator(group, "myvmss_1", rate_limit=2, rate_window=60.0))
    assert [imds.get(a, EVENTS, Q).status_code for _ in range(3)] == [200, 200, 429]
    assert imds.get(b, EVENTS, Q).status_code == 200


def test_rate_limit_can_be_disabled(group, serve, imds) -> None:
    for limit in (None, 0):
        server = serve(ImdsEmulator(group, f"vm_{limit}", rate_limit=limit))
        assert {imds.get(server, EVENTS, Q).status_code for _ in range(12)} == {200}


def test_default_emulator_limits_to_five_per_second() -> None:
    app = ImdsEmulator(PlacementGroup(), "myvmss_3")
    assert (app.limiter.limit, app.limiter.window) == (5.0, 1.0)


def test_sliding_window_recovers_after_one_second() -> None:
    clock = FakeMonotonic()
    limiter = SlidingWindowLimiter(5, 1.0, monotonic=clock)
    assert [limiter.allow() for _ in range(6)] == [True] * 5 + [False]
    clock.now += 0.5
    assert not limiter.allow()  # rejected requests do not count, but the window has not slid yet
    clock.now += 0.5
    assert [limiter.allow() for _ in range(6)] == [True] * 5 + [False]


def test_sliding_window_is_sliding_not_fixed() -> None:
    clock = FakeMonotonic()
    limiter = SlidingWindowLimiter(2, 1.0, monotonic=clock)
    assert limiter.allow()
    clock.now += 0.6
    assert limiter.allow() and not limiter.allow()
    clock.now += 0.4  # the first request left the window, the second has not
    assert limiter.allow() and not limiter.allow()


def test_first_call_gate_makes_early_callers_wait_for_the_same_moment() -> None:
    clock = FakeMonotonic()
    gate = FirstCallGate(5.0, sleep=clock.sleep, monotonic=clock)
    assert gate.pass_through() == 5.0
    assert gate.pass_through() == 0.0
    late = FirstCallGate(5.0, sleep=lambda s: None, monotonic=clock)
    late.pass_through()  # starts the countdown; sleep is a no-op here so time stands still
    clock.now += 2.0
    assert late.pass_through() == 3.0  # arrived during the countdown: waits for the rest


def test_first_call_delay_over_http(group, serve, imds) -> None:
    delay = 0.6  # the second answer must come sooner: a 0.6 s margin against a stalled machine
    app = ImdsEmulator(group, "myvmss_3", rate_limit=None, first_call_delay=delay)
    server = serve(app)
    # instance metadata does not start the countdown: only Scheduled Events is "enabled on first call"
    assert imds.get(server, "/metadata/instance", {"api-version": "2021-02-01"}).status_code == 200
    assert not app.first_call.started
    started = time.monotonic()
    assert imds.get(server, EVENTS, Q).status_code == 200
    first = time.monotonic() - started
    started = time.monotonic()
    assert imds.get(server, EVENTS, Q).status_code == 200
    second = time.monotonic() - started
    assert app.first_call.started and first >= delay
    assert second < first


def test_concurrent_first_calls_all_wait(group, serve, imds) -> None:
    delay = 0.3
    server = serve(ImdsEmulator(group, "myvmss_3", rate_limit=None, first_call_delay=delay))
    done: List[float] = []
    started = time.monotonic()

    def call() -> None:
        session = requests.Session()
        session.trust_env = False
        session.get(server.url + EVENTS, params=Q, headers={"Metadata": "true"}, timeout=10)
        done.append(time.monotonic() - started)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(done) == 3 and min(done) >= delay - 0.01


@pytest.mark.parametrize("status", [410, 500, 503])
def test_injected_status_then_recovery(vm, imds, status) -> None:
    vm.faults.add(status=status, path_contains="scheduledevents", times=2)
    codes = [imds.get(vm, EVENTS, Q).status_code for _ in range(3)]
    assert codes == [status, status, 200]


def test_injected_garbage_and_429_with_retry_after(vm, imds) -> None:
    vm.faults.add(garbage=True, method="GET")
    reply = imds.get(vm, EVENTS, Q)
    assert reply.status_code == 200
    with pytest.raises(ValueError):
        reply.json()
    vm.faults.add(status=429, headers={"Retry-After": "1"}, method="POST")
    eid = vm.app.group.add_event("Terminate", ["myvmss_3"])
    refused = imds.approve(vm, eid)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert vm.app.group.approvals == []  # the app never saw the refused POST
    assert imds.approve(vm, eid).status_code == 200


def test_injected_delay(vm, imds) -> None:
    vm.faults.add(delay=0.2)
    started = time.monotonic()
    assert imds.get(vm, EVENTS, Q).status_code == 200
    assert time.monotonic() - started >= 0.2
