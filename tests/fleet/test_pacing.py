"""Throttling without bursts: writes are paced per subscription from the remaining counts ARM and
Compute report, a Retry-After ends with one request and the rest spread at the refill rate, and a
429 without Retry-After is retried with backoff. The emulator's quotas and the rollout share one
ManualClock (time moves only when a request waits), so a 2-writes-per-4-s quota runs in a fraction of a
second and the machine's load cannot count as time: on a ScaledClock at 10x, real latency under load
counted ten times and 1 run in 4 drew a third 429 (issue 28)."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, List, Tuple

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.control import Connection
from vmss_terminate.fleet import Scope
from vmss_terminate.fleet.rollout import rollout
from vmss_terminate.fleet.throttle import BACKOFF_FIRST, SubscriptionThrottle, remaining_count
from vmss_terminate_sim.emulator.arm import fleetgen
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.quota import Quotas, parse_spec
from vmss_terminate_sim.emulator.faults import parse_fault_spec

LIMITED = fleetgen.subscription_id(0)
WRITES = ("PATCH", "POST", "PUT", "DELETE")


def _estate(clock: object, sets: int = 18) -> ArmState:
    state = ArmState(clock=clock)  # type: ignore[arg-type]
    state.load_seed({"generate": {"scaleSets": sets, "subscriptions": 3, "capacity": 4, "special": False}})
    return state


def test_a_limited_subscription_is_paced_not_burst(arm: ArmServers) -> None:
    clock = ManualClock()
    state = _estate(clock)
    state.quotas.configure([parse_spec(f"writes=2/0.5,subscription={LIMITED}")])  # 2 writes per 4 s
    arm.reset(state)
    result = rollout(timeout=10, connection=Connection(arm_endpoint=arm.arm_url), clock=clock, batch_size="2",
                     concurrency=18)
    assert result.ok, result.to_dict()["failed"]
    writes = [r for r in arm.arm_server.log.all() if r.method in WRITES]
    limited = [r for r in writes if LIMITED in r.path]
    refused = [r for r in limited if r.status == 429]
    assert len(limited) - len(refused) >= 12
    # the benchmark holds the 10 % target in real time; one 429 of slack for the probe that finds
    # out the refill rate (bursts after each pause gave 6 to 9)
    assert len(refused) <= 0.1 * (len(limited) - len(refused)) + 1, [r.status for r in limited]
    assert all(r.status != 429 for r in writes if LIMITED not in r.path)  # the others never waited on it
    assert result.throttling["paced"] > 0


def test_a_429_without_retry_after_is_retried_with_backoff(arm: ArmServers) -> None:
    clock = ManualClock()
    state = _estate(clock, sets=3)
    arm.reset(state)
    arm.arm_server.faults.add(parse_fault_spec("status=429,method=PATCH,times=2"))
    result = rollout(Scope.build(subscriptions=[LIMITED]), timeout=10, clock=clock,
                     connection=Connection(arm_endpoint=arm.arm_url))
    assert result.ok and result.throttling["throttled"] == 2 == result.throttling["retried"]
    # 1 s, then 2 s: doubled, on the clock (which the operation waits' polls advance too)
    assert result.throttling["waited_seconds"] == pytest.approx(BACKOFF_FIRST * 3)


def test_remaining_counts_from_arm_and_compute_headers() -> None:
    assert remaining_count({"x-ms-ratelimit-remaining-subscription-writes": "7"}, "writes") == 7
    assert remaining_count({"x-ms-ratelimit-remaining-resource":
                            "Microsoft.Compute/VMScaleSetBatchedVMRequests;4, Microsoft.Compute/VmssQueuedVMOperations;90",
                            "x-ms-ratelimit-remaining-subscription-writes": "150"}, "writes") == 4
    assert remaining_count({"x-ms-ratelimit-remaining-resource":
                            "Microsoft.Compute/GetVMScaleSet3Min;197,Microsoft.Compute/GetVMScaleSet30Min;1297"},
                           "reads") == 197
    assert remaining_count({"x-ms-ratelimit-remaining-subscription-reads": "3"}, "writes") is None


def test_after_a_retry_after_one_request_goes_and_the_next_waits_for_the_refill() -> None:
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)
    throttle.acquire("a", "writes")
    assert throttle.release("a", "writes", 429, {"Retry-After": "2"}) == 2.0
    start = clock.now()
    throttle.acquire("a", "writes")  # the pause ends: one token is back
    assert clock.now() - start == pytest.approx(2.0)
    throttle.release("a", "writes", 200, {"x-ms-ratelimit-remaining-subscription-writes": "0"})
    throttle.acquire("a", "writes")  # the next one waits for the refill (1 per 2 s), not a burst
    assert clock.now() - start == pytest.approx(4.0, abs=0.3)


def test_an_older_count_answered_last_is_not_believed_when_the_clock_did_not_move() -> None:
    """Two writes in flight answered in the other order than the server counted them, at one clock
    reading: the later-sent request's answer carries the older, higher count. The gate tells it by
    the order of claims and counts, not by comparing clock readings (equal on a ManualClock that did
    not move, a coarse system clock, a wall clock stepped back): believed, that count let a third
    write go at once into an empty bucket (test_pacing's third 429 under six busy processes, where
    the workers' answers came back bunched at one manual instant)."""
    clock = ManualClock()
    quotas = Quotas(clock, [parse_spec(f"writes=2/0.5,subscription={LIMITED}")])  # 2, one back per 2 s
    throttle = SubscriptionThrottle(clock)
    path = f"/subscriptions/{LIMITED}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/x"

    def send() -> Tuple[int, float, Any]:
        claimed = throttle.acquire(LIMITED, "writes")
        return claimed, clock.now(), None

    def answer(request: Tuple[int, float, Any], decision: Any) -> Any:
        headers = dict(decision.headers)
        if not decision.allowed:
            headers["Retry-After"] = str(decision.retry_after)
        throttle.release(LIMITED, "writes", 200 if decision.allowed else 429, headers, request[1], request[0])
        return decision

    for _ in range(3):  # the bucket's 2, then the probe that learns the refill (429, Retry-After 2)
        answer(send(), quotas.decide(LIMITED, "writes", path))
    first = send()  # when the pause ends
    second = send()  # a refill later, the first still in flight
    counted_second, counted_first = quotas.decide(LIMITED, "writes", path), quotas.decide(LIMITED, "writes", path)
    assert counted_second.allowed and counted_first.allowed
    answer(first, counted_first)  # remaining 0
    answer(second, counted_second)  # remaining 1, older: read before the first's request was counted
    third = send()
    assert answer(third, quotas.decide(LIMITED, "writes", path)).allowed, clock.now() - third[1]


def test_a_count_lowered_as_older_teaches_no_refill_rate() -> None:
    """A count believed lower than its answer said (it may be older than the last one) is no reading
    of the bucket: the next answer's count measured against it read the tokens it left out as refill
    (learnt 1/s for a 0.5/s bucket -- 0.87 in a traced run under six busy processes) and the gate
    paced a later write into an empty bucket."""
    clock = ManualClock()
    quotas = Quotas(clock, [parse_spec(f"writes=2/0.5,subscription={LIMITED}")])
    throttle = SubscriptionThrottle(clock)
    path = f"/subscriptions/{LIMITED}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/x"

    def send() -> Tuple[int, float]:
        claimed = throttle.acquire(LIMITED, "writes")
        return claimed, clock.now()

    def answer(request: Tuple[int, float], decision: Any) -> Any:
        headers = dict(decision.headers)
        if not decision.allowed:
            headers["Retry-After"] = str(decision.retry_after)
        throttle.release(LIMITED, "writes", 200 if decision.allowed else 429, headers, request[1], request[0])
        return decision

    for _ in range(3):  # the bucket's 2, then the probe that learns the refill (429, Retry-After 2)
        answer(send(), quotas.decide(LIMITED, "writes", path))
    first = send()
    counted_first = quotas.decide(LIMITED, "writes", path)  # remaining 0; its answer is slow
    clock.advance(4.0)  # other workers' waits
    second = send()
    counted_second = quotas.decide(LIMITED, "writes", path)  # remaining 1
    answer(first, counted_first)
    answer(second, counted_second)  # claimed before the first's count: believed as 0
    for _ in range(4):
        request = send()
        assert answer(request, quotas.decide(LIMITED, "writes", path)).allowed, throttle._gate((LIMITED, "writes"))


def _paced(spec: str, requests: int, workers: int, latency: float = 0.05) -> Tuple[int, float]:
    """`workers` rollout workers sending `requests` writes between them through one
    SubscriptionThrottle, against the emulator's own quota model, as a discrete-event simulation
    on one ManualClock: each request reaches the quota `latency / 2` after it leaves and its answer
    comes back `latency / 2` later; a worker the gate holds looks again when its pause ends or, told
    to wait for an answer, when the next one arrives. No thread, no wall clock: the same run every
    time, however loaded the machine. Returns the 429s and the clock seconds between the first and
    the last accepted write."""
    clock = ManualClock()
    quotas = Quotas(clock, [parse_spec(spec)])
    throttle = SubscriptionThrottle(clock)
    path = f"/subscriptions/{LIMITED}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/x"
    events: List[Tuple[float, int, str, int, Any]] = []
    order = itertools.count()

    def at(when: float, what: str, worker: int, data: Any = None) -> None:
        heapq.heappush(events, (when, next(order), what, worker, data))

    for worker in range(workers):
        at(clock.now(), "look", worker)
    waiting: List[int] = []
    refused, accepted, started = 0, [], 0
    while events:
        when, _, what, worker, data = heapq.heappop(events)
        clock.advance(max(0.0, when - clock.now()))
        if what == "look":
            if started >= requests:
                continue
            pause = throttle.try_acquire(LIMITED, "writes")
            if pause == 0:
                started += 1
                at(when + latency / 2, "arrive", worker, when)
            elif pause > 0:
                at(when + max(pause, 0.001), "look", worker)
            else:
                waiting.append(worker)
        elif what == "arrive":
            at(when + latency / 2, "answer", worker, (data, quotas.decide(LIMITED, "writes", path)))
        else:
            sent, decision = data
            headers = dict(decision.headers)
            if not decision.allowed:
                headers["Retry-After"] = str(decision.retry_after)
                refused += 1
                started -= 1  # the throttle sends it again
            else:
                accepted.append(sent)
            throttle.release(LIMITED, "writes", 200 if decision.allowed else 429, headers, sent)
            for other in [worker, *waiting]:
                at(when, "look", other)
            waiting.clear()
    assert len(accepted) == requests
    return refused, accepted[-1] - accepted[0]


@pytest.mark.parametrize("spec, requests, workers, minimum", [
    # sliding windows (ARM's per-hour limits, Compute's ...3Min policies): `bucket` more per window
    ("writes=2/4s", 13, 6, 24.0),   # benchmarks/fleet.py pacing --quota window
    ("writes=4/8s", 20, 6, 32.0),
    ("writes=10/30s", 40, 18, 90.0),
    ("writes=4/8s", 20, 1, 32.0),
    # token buckets: the window rule must neither slow them nor cost them 429s
    ("writes=2/0.5", 13, 6, 22.0),  # benchmarks/fleet.py pacing
    ("writes=2/0.5", 20, 1, 36.0),
])
def test_pacing_keeps_429s_under_ten_percent_for_windows_and_buckets(spec: str, requests: int, workers: int,
                                                                      minimum: float) -> None:
    """Issue 28 item 11: paced at the refill rate the count taught, a sliding window's writes were
    answered 429 14-23 % of the time (its tokens come back in clumps, one window after they were
    spent); now one 429 teaches the window and the rest fit it: <= 10 %, within 1.2 x the quota's
    minimum time (the first `bucket` writes at once, then `bucket` per window, or one per refill)."""
    refused, took = _paced(f"{spec},subscription={LIMITED}", requests, workers)
    assert refused <= 0.1 * requests, refused
    assert took <= 1.2 * minimum, took
