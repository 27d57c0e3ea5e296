"""Injectable clocks, so time-dependent logic (deadlines, NotBefore, LRO waits) is testable and
a sandbox can run a PT5M timeout in seconds.

A clock gives wall-clock epoch seconds (`now`), a monotonic reading (`monotonic`) and a way to
wait (`sleep`, `wait`), all on the same scale. `ScaledClock(speed=60)` makes one real second count
as a minute. `now` is what the VM's clock says and may step (NTP, chrony's makestep); `monotonic`
never steps: deadlines are measured on it (anchored to `now` once, when they are set).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol


class Clock(Protocol):
    #: How many of this clock's seconds pass per real second (1.0 for real time). Code that must
    #: wait in *real* time for something measured on this clock (a socket timeout, a thread join)
    #: divides by it.
    speed: float

    def now(self) -> float:
        """Current time as epoch seconds (UTC), on this clock's scale."""

    def monotonic(self) -> float:
        """Seconds on a clock that never steps (its origin means nothing), on this clock's scale."""

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait up to `seconds` of this clock's time for `event`; True if it was set."""


class SystemClock:
    """Real time."""

    speed = 1.0

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class ScaledClock:
    """Time that runs `speed` times faster than real time, starting at `start` (default: now)."""

    def __init__(self, speed: float = 1.0, start: Optional[float] = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._start = time.time() if start is None else start
        self._origin = time.monotonic()

    def now(self) -> float:
        return self._start + (time.monotonic() - self._origin) * self.speed

    def monotonic(self) -> float:
        return self.now()  # derived from time.monotonic(): it never steps

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.speed)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds) / self.speed)


class ManualClock:
    """Time that moves only when a test calls `advance`; `sleep` advances it (no real waiting).
    `step(seconds)` moves the wall clock (`now`) alone, as NTP stepping the VM's clock does;
    `monotonic` is untouched by it.

    `speed` is 1.0: real-time waits made on behalf of this clock (socket timeouts) are not scaled."""

    speed = 1.0

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = start
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._changed:
            self._now += seconds
            self._mono += seconds
            self._changed.notify_all()

    def reach(self, monotonic: float, timeout: float = 10.0) -> bool:
        """Block (at most `timeout` real seconds) until other threads' waits have moved monotonic
        time to `monotonic`: how a test's "hook that takes 30 s" waits, without sleeping."""
        return wait_until(self._changed, lambda: self._mono >= monotonic, timeout)

    def step(self, seconds: float) -> None:
        """The wall clock jumps by `seconds` (negative: back); monotonic time does not move."""
        with self._changed:
            self._now += seconds
            self._changed.notify_all()

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.advance(max(0.0, seconds))
        return event.is_set()


SYSTEM_CLOCK = SystemClock()


def wait_until(condition: threading.Condition, check: Callable[[], bool], wait_seconds: float) -> bool:
    """Wait on `condition` (notified on every change) until `check()` holds, at most `wait_seconds` real
    seconds; `check` runs with the condition's lock held. How tests and the sandbox wait for state,
    instead of sleeping."""
    deadline = time.monotonic() + wait_seconds
    with condition:
        while not check():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            condition.wait(remaining)
        return True
