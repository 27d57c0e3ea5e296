"""The throttle's gate never learns a refill rate of zero or below (another client spending tokens
between our answers, or a bucket that does not refill within seconds), never divides by one, and
never trusts a Retry-After it cannot read or that would keep the gate closed for hours."""

from __future__ import annotations

import threading
from typing import Iterable

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.fleet.throttle import (
    BACKOFF_FIRST,
    MIN_RATE,
    RETRY_AFTER_MAX,
    WRITES,
    SubscriptionThrottle,
    remaining_count,
)

SUB = "00000000-0000-0000-0000-000000000001"
HEADER = "x-ms-ratelimit-remaining-subscription-writes"


def _answers(throttle: SubscriptionThrottle, clock: ManualClock, counts: Iterable[int]) -> None:
    for count in counts:
        throttle.acquire(SUB, WRITES)
        clock.advance(1)
        throttle.release(SUB, WRITES, 200, {HEADER: str(count)})


def _acquires_in_bounded_time(throttle: SubscriptionThrottle) -> bool:
    done, failed = threading.Event(), []

    def go() -> None:
        try:
            throttle.acquire(SUB, WRITES)
        except BaseException as error:  # reported by the assertion below
            failed.append(error)
        done.set()

    threading.Thread(target=go, daemon=True).start()
    assert done.wait(10), "acquire never returned"
    assert not failed, failed
    return True


@pytest.mark.parametrize("counts", [(9, 5, 1, 1), tuple(range(9, -1, -1))],
                         ids=["another-client-spends", "no-refill-within-seconds"])
def test_a_count_that_falls_faster_than_we_spend_teaches_no_rate(counts: Iterable[int]) -> None:
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)
    _answers(throttle, clock, counts)
    rate = throttle._gates[(SUB, WRITES)].rate
    assert rate is None or rate >= MIN_RATE
    clock.advance(0.5)
    start = clock.now()
    assert _acquires_in_bounded_time(throttle)
    assert clock.now() - start <= 1.0 / MIN_RATE + 1  # a token per BACKOFF_MAX at the slowest


def test_a_learnt_rate_never_falls_below_the_floor() -> None:
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)
    # a slow but real refill: 1 token back in 100 s
    for count, gap in ((9, 1), (8, 1), (8, 100), (7, 1)):
        throttle.acquire(SUB, WRITES)
        clock.advance(gap)
        throttle.release(SUB, WRITES, 200, {HEADER: str(count)})
    rate = throttle._gates[(SUB, WRITES)].rate
    assert rate is not None and rate >= MIN_RATE


@pytest.mark.parametrize("value", ["inf", "Infinity", "nan", "1e400", "-inf", "9" * 5000])
def test_an_unreadable_retry_after_falls_back_to_the_backoff(value: str) -> None:
    throttle = SubscriptionThrottle(ManualClock())
    throttle.acquire(SUB, WRITES)
    assert throttle.release(SUB, WRITES, 429, {"Retry-After": value}) == BACKOFF_FIRST


def test_a_huge_retry_after_closes_the_gate_for_the_cap_at_most() -> None:
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)
    throttle.acquire(SUB, WRITES)
    assert throttle.release(SUB, WRITES, 429, {"Retry-After": "999999999"}) == RETRY_AFTER_MAX
    start = clock.now()
    assert _acquires_in_bounded_time(throttle)
    assert clock.now() - start == pytest.approx(RETRY_AFTER_MAX)


def test_a_policy_count_of_thousands_of_digits_is_not_read() -> None:
    headers = {"x-ms-ratelimit-remaining-resource": "Microsoft.Compute/PutVMScaleSet3Min;" + "9" * 5000}
    assert remaining_count(headers, WRITES) is None
    headers["x-ms-ratelimit-remaining-resource"] += ",Microsoft.Compute/PutVMScaleSet30Min;7"
    assert remaining_count(headers, WRITES) == 7


def test_a_refill_a_hair_short_of_a_token_does_not_spin_on_a_manual_clock() -> None:
    """The gate's refill lands a hair below one token (floating point): the pause it then asks for
    (~1e-12 s) is below the clock's resolution at epoch 1.7e9 (2.4e-7 s), so a ManualClock never
    moved and acquire spun for ever (issue 28: rollout workers stuck in acquire under load). A
    pause is at least MIN_PAUSE, which every clock can count."""
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)
    gate = throttle._gate((SUB, WRITES))
    now = clock.now()
    gate.at = now - 0.5
    span = now - gate.at  # what the float subtraction really gives
    gate.tokens, gate.bucket, gate.heard = 0.0, 2.0, True
    gate.rate = (1.0 - 1e-12) / span
    assert gate.available(now) < 1.0  # a hair short of a token
    throttle.stop = threading.Event()
    try:
        assert _acquires_in_bounded_time(throttle)
    finally:
        throttle.stop.set()  # without the fix: end the spinning thread
    assert clock.now() - now < 0.01


def test_a_slow_answer_does_not_teach_a_fast_refill() -> None:
    """A count comes from some moment between its request's sending and its answer: an answer that
    took 10 s (a loaded machine) must not make the next count's rise look like it happened in 1 s
    (the paced subscription then drew 429s under load, issue 28)."""
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)

    def answer(count: int, took: float) -> None:
        throttle.acquire(SUB, WRITES)
        sent = clock.now()
        clock.advance(took)
        throttle.release(SUB, WRITES, 200, {HEADER: str(count)}, sent)

    answer(9, 1)
    answer(5, 10)  # slow: its count may be from the moment it was sent
    answer(6, 1)  # two tokens back (one spent) over at most 11 s, not over the last 1 s
    rate = throttle._gates[(SUB, WRITES)].rate
    assert rate is not None and rate <= 2 / 11 + 1e-9
