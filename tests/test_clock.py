from __future__ import annotations

import threading

import pytest

from vmss_terminate.clock import ManualClock, ScaledClock


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(start=100.0)
    assert clock.now() == 100.0
    clock.sleep(5)
    clock.advance(2.5)
    assert clock.now() == 107.5


def test_manual_clock_wait_returns_event_state_and_advances() -> None:
    clock, event = ManualClock(start=0.0), threading.Event()
    assert clock.wait(event, 3) is False and clock.now() == 3
    event.set()
    assert clock.wait(event, 3) is True and clock.now() == 3


def test_scaled_clock_runs_faster_than_real_time() -> None:
    clock = ScaledClock(speed=1000.0, start=0.0)
    event = threading.Event()
    clock.wait(event, 50.0)  # 50 clock seconds = 50 ms real
    assert clock.now() >= 50.0


def test_scaled_clock_rejects_non_positive_speed() -> None:
    with pytest.raises(ValueError):
        ScaledClock(speed=0)


def test_wait_until_returns_when_the_check_holds_and_is_bounded_otherwise() -> None:
    from vmss_terminate.clock import wait_until

    condition, items = threading.Condition(), []
    assert wait_until(condition, lambda: bool(items), 0.05) is False

    def produce() -> None:
        with condition:
            items.append(1)
            condition.notify_all()

    threading.Thread(target=produce).start()
    assert wait_until(condition, lambda: bool(items), 5) is True


def test_every_clock_says_its_speed() -> None:
    from vmss_terminate.clock import SYSTEM_CLOCK
    assert SYSTEM_CLOCK.speed == 1.0 and ManualClock().speed == 1.0 and ScaledClock(speed=60).speed == 60
