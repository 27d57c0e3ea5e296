"""A clock for the queue source's tests: real time whose readings the test pushes forward (`offset`:
the replica was starved, or its renewals failed, that long), optionally with a frozen monotonic
reading that only the test moves."""

from __future__ import annotations

import time
from typing import Any


class ShiftedClock:
    speed = 1.0

    def __init__(self, frozen: bool = False) -> None:
        self.offset = 0.0
        self.frozen = time.monotonic() if frozen else None  # only the test moves it: no real time counts

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return (time.monotonic() if self.frozen is None else self.frozen) + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: Any, seconds: float) -> bool:
        return bool(event.wait(seconds))
