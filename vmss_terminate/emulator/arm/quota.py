"""Per-subscription request quotas for the local ARM emulator, as ARM throttles: a token bucket per
subscription and kind (reads = GET/HEAD, writes = PUT/PATCH/POST/DELETE). Off by default.

Why a token bucket: it is Azure Resource Manager's own throttling algorithm (a bucket of N tokens
refilled at R per second per subscription); a client that paces itself by the
`x-ms-ratelimit-remaining-subscription-reads|writes` headers and honours `Retry-After` on a 429
behaves the same against this as against Azure. Time comes from the state's clock, so a test with a
ManualClock decides when tokens come back.

Configuration (seed `"quotas"`, `start_arm(quotas=...)`, CLI `--quota writes=BUCKET/PERSECOND`)::

    {"writes": {"bucket": 40, "refillPerSecond": 20}, "reads": {"bucket": 1000, "refillPerSecond": 100}}

A refused request gets 429 with Azure's body (`SubscriptionRequestsThrottled`), `Retry-After`
(whole seconds until a token is back, at least 1) and the remaining header 0; every answered
request of a configured kind carries the remaining header.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock

KINDS = ("reads", "writes")
READ_METHODS = ("GET", "HEAD")
_SPEC = re.compile(r"^\s*(reads|writes)\s*=\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*$")


def header(kind: str) -> str:
    return f"x-ms-ratelimit-remaining-subscription-{kind}"


def kind_of(method: str) -> str:
    return "reads" if method.upper() in READ_METHODS else "writes"


@dataclass(frozen=True)
class Limit:
    """`bucket` tokens, refilled at `refill_per_second`."""

    bucket: int
    refill_per_second: float

    def __post_init__(self) -> None:
        if self.bucket < 1 or self.refill_per_second <= 0:
            raise ValueError("a quota needs bucket >= 1 and refillPerSecond > 0")


def parse_limits(config: Mapping[str, Any]) -> Dict[str, Limit]:
    """`{"writes": {"bucket": N, "refillPerSecond": R}, ...}` -> limits (ValueError when malformed)."""
    limits = {}
    for kind, value in config.items():
        if kind not in KINDS or not isinstance(value, Mapping):
            raise ValueError(f"quotas: expected {' / '.join(KINDS)} objects with bucket and refillPerSecond, "
                             f"not {kind!r}")
        limits[kind] = Limit(int(value["bucket"]), float(value["refillPerSecond"]))
    return limits


def parse_spec(text: str) -> Tuple[str, Limit]:
    """`writes=40/20` (bucket 40, 20 per second) -> ("writes", Limit)."""
    match = _SPEC.match(text)
    if not match:
        raise ValueError(f"invalid quota {text!r}: use reads|writes=BUCKET/PERSECOND, e.g. writes=40/20")
    return match.group(1), Limit(int(match.group(2)), float(match.group(3)))


class Quotas:
    """Token buckets per (subscription, kind); `take` spends one token or says how long to wait."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, limits: Optional[Dict[str, Limit]] = None) -> None:
        self.clock = clock
        self.limits: Dict[str, Limit] = dict(limits or {})
        self._buckets: Dict[Tuple[str, str], Tuple[float, float]] = {}  # -> (tokens, at)
        self._lock = threading.Lock()

    def configure(self, limits: Dict[str, Limit]) -> None:
        with self._lock:
            self.limits.update(limits)
            self._buckets.clear()

    def take(self, subscription: str, kind: str) -> Tuple[bool, int, int]:
        """(allowed, remaining tokens, Retry-After seconds when refused). Unlimited kinds: (True, -1, 0)."""
        limit = self.limits.get(kind)
        if limit is None:
            return True, -1, 0
        key = (subscription.lower(), kind)
        with self._lock:
            now = self.clock.now()
            tokens, at = self._buckets.get(key, (float(limit.bucket), now))
            tokens = min(float(limit.bucket), tokens + max(0.0, now - at) * limit.refill_per_second)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return True, int(tokens - 1.0), 0
            self._buckets[key] = (tokens, now)
            wait = (1.0 - tokens) / limit.refill_per_second
            return False, 0, max(1, math.ceil(wait))
