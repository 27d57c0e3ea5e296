"""The ARM emulator's sliding-window quota (issue 28 item 11): at most N requests in any W seconds,
each token back exactly W seconds after it was spent -- ARM's per-hour limits and Compute's windowed
policies -- opt-in beside the token buckets, with the same remaining header and 429 + Retry-After."""

from __future__ import annotations

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.arm.quota import Limit, Quotas, parse_limits, parse_spec

SUB = "00000000-0000-0000-0000-0000000000aa"
PATH = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/x"
HEADER = "x-ms-ratelimit-remaining-subscription-writes"


def test_a_window_gives_its_tokens_back_when_its_oldest_requests_leave_it() -> None:
    clock = ManualClock()
    quotas = Quotas(clock, [parse_spec("writes=3/10s")])
    counts = []
    for gap in (0, 1, 1):  # three writes at 0, 1 and 2 s
        clock.advance(gap)
        decision = quotas.decide(SUB, "writes", PATH)
        counts.append(decision.headers[HEADER])
    assert counts == ["2", "1", "0"]
    clock.advance(5)  # 7 s: the window still holds all three -- a bucket would have refilled by now
    refused = quotas.decide(SUB, "writes", PATH)
    assert not refused.allowed and refused.retry_after == 3  # the write at 0 leaves at 10 s
    assert refused.headers[HEADER] == "0"
    clock.advance(3)  # 10 s: the first write left the window; one token, not a refill's fraction
    assert quotas.decide(SUB, "writes", PATH).headers[HEADER] == "0"
    clock.advance(2)  # 12 s: the writes at 1 and 2 s left it too: their two tokens together
    assert quotas.decide(SUB, "writes", PATH).headers[HEADER] == "1"


def test_a_window_is_declared_in_a_seed_or_on_the_command_line() -> None:
    (seeded,) = parse_limits([{"kind": "writes", "bucket": 1200, "windowSeconds": 3600, "subscription": SUB}])
    assert seeded == Limit(1200, 0.0, "writes", SUB, None, 3600.0)
    assert parse_spec(f"writes=1200/3600s,subscription={SUB}") == seeded
    assert parse_spec("writes=40/20").window is None  # a bucket, as before


@pytest.mark.parametrize("bad", [
    [{"kind": "writes", "bucket": 2, "windowSeconds": 4, "refillPerSecond": 1}],
    [{"kind": "writes", "bucket": 2, "windowSeconds": 0}],
    [{"kind": "writes", "bucket": 0, "windowSeconds": 4}],
])
def test_a_window_that_makes_no_sense_is_refused(bad: list) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        parse_limits(bad)
