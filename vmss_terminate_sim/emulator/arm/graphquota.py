"""Resource Graph's per-user query quota, as Azure documents it (docs: "Guidance for throttled
requests in Azure Resource Graph"): at most `limit` queries per `window` seconds; every answer says
`x-ms-user-quota-remaining` and `x-ms-user-quota-resets-after` (hh:mm:ss); a query over the quota
is answered 429. Off unless a test or seed sets `ArmState.graph_quota`."""

from __future__ import annotations

import math
import threading
from typing import Dict, Optional, Tuple

from vmss_terminate.clock import Clock


def hhmmss(seconds: float) -> str:
    whole = max(0, int(math.ceil(seconds)))
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class GraphUserQuota:
    """Fixed windows of `window` seconds on the emulator's clock; `refused` counts 429s answered."""

    def __init__(self, clock: Clock, limit: int = 15, window: float = 5.0) -> None:
        self.clock, self.limit, self.window = clock, limit, window
        self.refused = 0
        self._start: Optional[float] = None
        self._used = 0
        self._lock = threading.Lock()

    def take(self) -> Tuple[bool, Dict[str, str], float]:
        """(allowed, the answer's quota headers, seconds until the window resets) for one query now."""
        with self._lock:
            now = self.clock.monotonic()
            if self._start is None or now >= self._start + self.window:
                self._start, self._used = now, 0
            allowed = self._used < self.limit
            if allowed:
                self._used += 1
            else:
                self.refused += 1
            resets = self._start + self.window - now
            headers = {"x-ms-user-quota-remaining": str(self.limit - self._used),
                       "x-ms-user-quota-resets-after": hhmmss(resets)}
            return allowed, headers, resets
