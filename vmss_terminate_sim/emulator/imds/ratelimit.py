"""IMDS throttling behaviours: the per-VM rate limit and the slow first Scheduled Events call.

Both run on real monotonic time on purpose: they model how the service answers an HTTP client,
which lives in real time, independent of the (possibly manual) clock that drives event life cycles.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Deque, Optional


class SlidingWindowLimiter:
    """At most `limit` admitted requests in any `window` seconds; `limit` None/0 disables it.

    IMDS: "requests ... are limited to 5 requests per second (on a per VM basis). Requests
    exceeding this threshold will be rejected with 429". Rejected requests are not counted, so a
    client that backs off recovers after one window.
    """

    def __init__(self, limit: Optional[float] = 5.0, window: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._monotonic = monotonic
        self._admitted: Deque[float] = collections.deque()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.limit) and self.limit > 0  # type: ignore[operator]

    def allow(self) -> bool:
        if not self.enabled:
            return True
        now = self._monotonic()
        with self._lock:
            while self._admitted and now - self._admitted[0] >= self.window:
                self._admitted.popleft()
            if len(self._admitted) >= self.limit:  # type: ignore[operator]
                return False
            self._admitted.append(now)
            return True


class FirstCallGate:
    """Scheduled Events is enabled by the first request, which may take up to two minutes.

    The first request starts the countdown; it and every request arriving before the countdown
    ends wait until `delay` seconds after that first request. Later requests pass at once.
    """

    def __init__(self, delay: float = 0.0, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.delay = float(delay)
        self._sleep = sleep
        self._monotonic = monotonic
        self._ready_at: Optional[float] = None
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        """Whether the first request has come (the countdown is running or over)."""
        with self._lock:
            return self._ready_at is not None

    def pass_through(self) -> float:
        """Wait as the service would; returns the seconds waited."""
        if self.delay <= 0:
            return 0.0
        with self._lock:
            now = self._monotonic()
            if self._ready_at is None:
                self._ready_at = now + self.delay
            wait = self._ready_at - now
        if wait > 0:
            self._sleep(wait)  # emulated service latency, not synchronisation
            return wait
        return 0.0
