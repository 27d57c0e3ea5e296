"""Per-subscription throttling for fleet work: one gate per (subscription, reads|writes), shared by
every worker, plugged into the Azure SDK pipeline as a per-retry policy.

Why not leave 429s to azure-core's RetryPolicy: it sleeps in the worker that got the 429 while the
other workers of the same subscription keep spending the empty bucket, and it sleeps in real time
(untestable). Here a 429 closes that subscription's gate for `Retry-After` seconds for everyone,
other subscriptions carry on, and the waiting is done on the injectable clock. The
`x-ms-ratelimit-remaining-subscription-*` header keeps the gate from sending more requests at once
than the bucket still holds.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock

READS, WRITES = "reads", "writes"
REMAINING_HEADER = "x-ms-ratelimit-remaining-subscription-{}"
DEFAULT_RETRY_AFTER = 5.0  # seconds, when a 429 carries no Retry-After
MAX_RETRIES = 30  # per request; a request still throttled after that is answered with its 429
_SUBSCRIPTION = re.compile(r"/subscriptions/([^/?]+)", re.IGNORECASE)


@dataclass
class _Gate:
    blocked_until: float = 0.0
    remaining: Optional[int] = None  # tokens the last answer said were left
    in_flight: int = 0


@dataclass
class ThrottleStats:
    """What throttling did: counted per subscription, for reports and the benchmark."""

    throttled: Dict[str, int] = field(default_factory=dict)  # 429s received
    retried: Dict[str, int] = field(default_factory=dict)  # 429s retried
    gave_up: int = 0  # requests answered with a 429 after MAX_RETRIES
    waited_seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return {"throttled": sum(self.throttled.values()), "retried": sum(self.retried.values()),
                "gave_up": self.gave_up, "waited_seconds": round(self.waited_seconds, 3),
                "throttled_by_subscription": dict(self.throttled)}


class SubscriptionThrottle:
    """Gates shared by every client of one fleet run."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_retries: int = MAX_RETRIES, slice_seconds: float = 0.05) -> None:
        self.clock = clock
        self.max_retries = max_retries
        self.slice = slice_seconds  # how often a waiting worker re-checks a gate held by in-flight calls
        self.stats = ThrottleStats()
        self._gates: Dict[Tuple[str, str], _Gate] = {}
        self._changed = threading.Condition()

    def _gate(self, key: Tuple[str, str]) -> _Gate:
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate()
        return gate

    def acquire(self, subscription: str, kind: str) -> None:
        """Wait until the subscription's gate is open and the bucket (as last reported) has a token
        not already claimed by a request in flight."""
        key = (subscription.lower(), kind)
        waited = 0.0
        while True:
            with self._changed:
                gate = self._gate(key)
                now = self.clock.now()
                if gate.blocked_until > now:
                    pause = gate.blocked_until - now
                elif gate.remaining is not None and gate.in_flight >= max(1, gate.remaining):
                    pause = -1.0  # wait for an in-flight answer to refresh `remaining`
                else:
                    gate.in_flight += 1
                    if waited:
                        self.stats.waited_seconds += waited
                    return
                if pause < 0:
                    self._changed.wait(self.slice)
                    continue
            self.clock.sleep(pause)
            waited += pause

    def release(self, subscription: str, kind: str, status: Optional[int], headers: Any) -> Optional[float]:
        """Record an answer; returns the seconds to back off when it was a 429 (the gate is then closed)."""
        key = (subscription.lower(), kind)
        with self._changed:
            gate = self._gate(key)
            gate.in_flight = max(0, gate.in_flight - 1)
            remaining = _int(_header(headers, REMAINING_HEADER.format(kind)))
            if remaining is not None:
                gate.remaining = remaining
            backoff = None
            if status == 429:
                backoff = _float(_header(headers, "Retry-After"))
                backoff = DEFAULT_RETRY_AFTER if backoff is None else backoff
                gate.blocked_until = max(gate.blocked_until, self.clock.now() + backoff)
                gate.remaining = None  # unknown until the next answer after the pause
                sub = subscription.lower()
                self.stats.throttled[sub] = self.stats.throttled.get(sub, 0) + 1
            self._changed.notify_all()
            return backoff

    def note_retry(self, subscription: str) -> None:
        with self._changed:
            sub = subscription.lower()
            self.stats.retried[sub] = self.stats.retried.get(sub, 0) + 1

    def policy(self) -> Any:
        """An azure-core HTTPPolicy for `per_retry_policies`: gate, send, and on a 429 wait and resend."""
        from azure.core.pipeline.policies import HTTPPolicy  # noqa: PLC0415 - SDK imported lazily

        throttle = self

        class SubscriptionThrottlePolicy(HTTPPolicy[Any, Any]):
            def send(self, request: Any) -> Any:
                http = request.http_request
                found = _SUBSCRIPTION.search(http.url.split("?")[0])
                if not found:
                    return self.next.send(request)
                subscription = found.group(1)
                kind = READS if http.method.upper() in ("GET", "HEAD") else WRITES
                body = http.body if hasattr(http.body, "seek") else None
                position = body.tell() if body is not None else None
                attempt = 0
                while True:
                    throttle.acquire(subscription, kind)
                    try:
                        response = self.next.send(request)
                    except BaseException:
                        throttle.release(subscription, kind, None, {})
                        raise
                    status = response.http_response.status_code
                    backoff = throttle.release(subscription, kind, status, response.http_response.headers)
                    if backoff is None:
                        return response
                    if attempt >= throttle.max_retries:
                        with throttle._changed:
                            throttle.stats.gave_up += 1
                        return response
                    attempt += 1
                    throttle.note_retry(subscription)
                    if body is not None and position is not None:
                        body.seek(position)

        return SubscriptionThrottlePolicy()


def _header(headers: Any, name: str) -> Optional[str]:
    if headers is None:
        return None
    value: Optional[str] = headers.get(name)
    if value is None:
        for key in headers:
            if key.lower() == name.lower():
                return str(headers[key])
    return value


def _int(value: Optional[str]) -> Optional[int]:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def _float(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(str(value).strip())) if value is not None else None
    except ValueError:
        return None
