"""Per-subscription throttling for fleet work: one gate per (subscription, reads|writes), shared by
every worker, plugged into the Azure SDK pipeline as a per-retry policy.

Why not leave 429s to azure-core's RetryPolicy: it sleeps in the worker that got the 429 while the
other workers of the same subscription keep spending the empty bucket, it sleeps in real time
(untestable), and it does not retry a PATCH/POST 429 that carries no Retry-After. Here a 429 closes
that subscription's gate for `Retry-After` seconds (at most 300 s; without one, or an unreadable or
non-finite one: 1 s doubled per 429 in a row, up to 60 s) for everyone, other subscriptions carry on,
and the waiting is done on the injectable clock.

Pacing: the remaining counts every answer carries (`x-ms-ratelimit-remaining-subscription-*`, and
Compute's `x-ms-ratelimit-remaining-resource` policies, the lowest of them) keep the gate from
sending more requests at once than the bucket still holds, and the gate learns the bucket's refill
rate (from how the count moves between answers, and from a Retry-After: a token is back within it).
As the count runs out, requests are spread at that rate, one token at a time; when a Retry-After
ends, one request goes and the rest follow at the rate instead of in a burst that empties the bucket
again (measured: 47 % of a throttled subscription's writes were 429s before, see docs/benchmarks.md).
Compute's per-resource policies are counted with the subscription's (the lowest count paces the
subscription): conservative, and the issue's rule is per subscription.

Sliding windows (ARM's per-hour limits, Compute's `...3Min`/`...30Min` policies): at most N requests
in any W seconds, each token back exactly W after it was spent. A burst's tokens then come back
together, and the rate learnt from the count moving (N tokens in W seconds) is right on average but
wrong in its timing: paced at it, a request went while the window still held the burst (14-23 % of
writes answered 429, issue 28 item 11). So the gate also keeps when its own accepted requests were
sent, and a 429's Retry-After tells how long the window is: the oldest of the last N sends leaves
it then (W = now + Retry-After - that send). From then on no more than N requests are sent in any W
seconds (counting those in flight). A token bucket of N refilled at R never refuses what that allows
once W >= N / R, and the rate model still paces it as before; the window rule only holds a request
back where a window would refuse it.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Optional, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.operations import retry_after_seconds
from vmss_terminate.control.pipeline import (  # a longer Retry-After closes the gate this long at most
    RETRY_AFTER_MAX,
    THROTTLE_GAVE_UP,
)
from vmss_terminate.errors import AzureError

READS, WRITES = "reads", "writes"
REMAINING_HEADER = "x-ms-ratelimit-remaining-subscription-{}"
RESOURCE_HEADER = "x-ms-ratelimit-remaining-resource"  # Compute: Microsoft.Compute/<Policy>;<remaining>[,...]
BACKOFF_FIRST = 1.0  # seconds, after a 429 without Retry-After; doubled per 429 in a row ...
BACKOFF_MAX = 60.0  # ... up to this
MIN_RATE = 1.0 / BACKOFF_MAX  # tokens per second: the slowest refill a gate assumes (a wait stays bounded)
NAP_SECONDS = 0.25  # a paced request re-checks its gate this often while it waits
MIN_PAUSE = 0.001  # the shortest wait: a refill a hair short of a token asks for ~1e-12 s, which a
# clock at epoch 1.7e9 (resolution 2.4e-7 s) cannot count -- an injected clock never moved and acquire spun
MAX_RETRIES = 30  # per request; a request still throttled after that is answered with its 429
HISTORY = 1000  # accepted sends remembered per gate: a window is measured against the last N of them
_SUBSCRIPTION = re.compile(r"/subscriptions/([^/?]+)", re.IGNORECASE)
_POLICY_COUNT = re.compile(r";\s*(-?\d{1,18})\s*$")  # digits bounded: int() of thousands fails


@dataclass
class _Gate:
    """What one (subscription, kind) gate knows of its bucket: `tokens` left as of `at` (None:
    unknown, nothing limits), the refill `rate` in tokens per second (None: not learnt yet)."""

    blocked_until: float = 0.0
    tokens: Optional[float] = None
    at: float = 0.0
    rate: Optional[float] = None
    bucket: float = 1.0  # the most tokens ever seen: what the refill cannot exceed
    in_flight: int = 0
    answered: int = 0  # answers since `at` (each spent a token)
    in_a_row: int = 0  # 429s in a row (the backoff without Retry-After doubles with them)
    heard: bool = False  # an answer came back: until then one request at a time finds out the count
    sent: Optional[float] = None  # when the request whose count is `tokens` was sent (the count is from then .. `at`)
    window: Optional[float] = None  # seconds: a sliding window's length, learnt from a 429 (None: none seen)
    clumped: bool = False  # a count came back a whole token above the refill's: tokens return in clumps
    history: Deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # accepted sends, in order
    lowered: bool = False  # `tokens` was lowered below what its answer said (an older count): no reading
    counts: int = 0  # how many times `tokens` was set: a request claimed at another value was in flight
    # when a later count was read (its answer may carry the older count) -- by order, not by clock

    def window_wait(self, now: float) -> float:
        """Seconds until one more request fits the learnt window (0 when it does, or none is known):
        at most `bucket` sends -- those remembered and those in flight -- in any `window` seconds."""
        if self.window is None:
            return 0.0
        limit = max(1, int(self.bucket))
        inside = [sent for sent in self.history if sent > now - self.window]  # oldest first
        excess = len(inside) + self.in_flight - limit + 1
        if excess <= 0:
            return 0.0
        if excess > len(inside):  # requests in flight alone fill it: their answers will tell
            return -1.0
        return inside[excess - 1] + self.window - now

    def window_returned(self, now: float) -> bool:
        """With a window learnt, whether the last count plus the tokens the window gave back since
        (sends that left it after that count was read) leaves one for another request: a window's
        tokens come back when its oldest sends leave it, not at the average rate."""
        if self.window is None or self.tokens is None or not self.clumped:
            return False
        if self.rate is not None and self.window < self.bucket / self.rate:
            # shorter than a bucket this size refills in at the learnt rate: counting "returns"
            # then could promise a bucket's burst back long before it refilled (a 200-write burst
            # 429'd after one second looks like a 2-second window; ARM refills 10 a second)
            return False
        since, until = self.at - self.window, now - self.window
        back = sum(1 for sent in self.history if since < sent <= until)
        return self.tokens + back - self.in_flight >= 1

    def learn_window(self, now: float, retry_after: float) -> None:
        """A 429 from a full window: the oldest of the last `bucket` accepted sends leaves it after
        `retry_after`, so the window is at least `now + retry_after - that send` long (whole-second
        Retry-Afters round it up: the estimate errs long, never short). The longest seen is kept.
        Only when those sends were recent (within `retry_after`): a 429 after sends spread over an
        hour (another client spending the quota) says nothing of a window, and an hour-long one
        learnt from it would hold the gate to `bucket` requests an hour."""
        limit = max(1, int(self.bucket))
        if len(self.history) < limit or now - self.history[-limit] > retry_after:
            return
        length = now + retry_after - self.history[-limit]
        if length > 0:
            self.window = max(self.window or 0.0, min(length, RETRY_AFTER_MAX))

    def available(self, now: float) -> Optional[float]:
        """Tokens the next request may use: the last count, refilled at the learnt rate, less what
        requests in flight will spend."""
        if self.tokens is None:
            return None
        refilled = self.tokens + (self.rate or 0.0) * max(0.0, now - self.at)
        return min(refilled, max(self.bucket, self.tokens)) - self.in_flight

    def ceiling(self) -> float:
        """Tokens a request could have at the most once the bucket is full again."""
        return max(self.bucket, self.tokens or 0.0) - self.in_flight

    def note_clump(self, remaining: int, now: float) -> None:
        """A count a whole token above what the last count and the learnt rate explain: tokens came
        back together (a window's oldest sends leaving it), not at a rate. Only then does the
        gate count a window's returns (`window_returned`); a bucket's counts never jump so, and
        there a window guessed from one 429 after a burst would be too short."""
        if self.window is None or self.tokens is None:
            return
        expected = self.tokens + (self.rate or 0.0) * max(0.0, now - self.at) - self.answered - 1
        if remaining >= min(expected, self.bucket - 1) + 1:
            self.clumped = True

    def learn(self, remaining: int, now: float, sent: Optional[float] = None, claimed: Optional[int] = None) -> None:
        """A fresh count from an answer: learn the refill rate from how the count moved since the
        last one (answers since then each spent a token), then restart from it. Only an answer with
        no other request in flight (so the count moved by refill alone), and only a count above
        zero says tokens came back faster than they were spent (Azure reports whole tokens, so a 0
        proves nothing): the rate then rises, at most doubling per answer, so one early answer does
        not make it burst; it falls smoothly, and a 429 halves it. The count moved over at most the
        time from the previous request's sending to now (each count is from some moment between its
        request's sending and its answer): dividing by that, a slow or delayed answer (a loaded
        machine, a far region) makes the rate err low, never high."""
        span = max(0.1, 0.5 / self.rate) if self.rate else 0.1  # at least half a token's refill time
        # no other request spent tokens meanwhile, so the change is refill: none in flight now, none
        # answered since the last count, and this one sent after that count was read -- one sent
        # before it may already be in it (the server counted it first, its answer came second), and
        # reading its spend as refill overestimated the rate by a token (under load, when answers
        # overtake each other, and on a test's shared ManualClock: test_pacing's extra 429s)
        older = self._in_flight_at_last_count(sent, claimed)
        alone = self.in_flight == 0 and self.answered == 0 and not older
        # nor from a count lowered below its answer's (below the server's count then): the tokens it
        # left out would read as refill (a rate learnt at 0.87 for 0.5, and a 429, under load)
        if (self.tokens is not None and alone and not self.lowered and remaining >= 1 and now - self.at >= span
                and self.tokens < self.bucket - 1):
            since = self.at if self.sent is None else min(self.sent, self.at)
            refill = (remaining - (self.tokens - self.answered - 1)) / (now - since)
            # refill <= 0: someone else (another client of the subscription) spent tokens meanwhile,
            # or the bucket does not refill within seconds -- no rate can be learnt from it
            if refill > 0:
                if self.rate is None:
                    self.rate = refill
                elif refill > self.rate:
                    self.rate = min(refill, 2 * self.rate)
                else:
                    self.rate = 0.5 * (self.rate + refill)
                self.rate = max(MIN_RATE, self.rate)  # never slower than a token per BACKOFF_MAX
        self.bucket = max(self.bucket, remaining + 1.0)  # it held this one's token too
        count = float(remaining)
        if older and self.tokens is not None:
            # in flight when the last count was read: the server may have counted it after that
            # count's request (this count is then the older, one token too high). Believe the lower
            # of it and the last count less this request's token, refilled since: overwritten by an
            # older count, the gate sent one request too many (a 429 in test_pacing under load)
            refilled = min(self.bucket, self.tokens + (self.rate or 0.0) * max(0.0, now - self.at))
            count = max(0.0, min(count, refilled - 1.0))
        self.tokens, self.at, self.answered, self.sent = count, now, 0, sent
        self.lowered = count < remaining
        self.counts += 1

    def _in_flight_at_last_count(self, sent: Optional[float], claimed: Optional[int]) -> bool:
        """Whether this answer's request was claimed before the last count was read (so the server may
        have counted it after that count's request, and its count be the older one). Told by
        `claimed` (the gate's `counts` when its token was claimed): equal clock readings cannot say
        it -- a ManualClock that did not move, a coarse system clock, a wall clock stepped back --
        and a count read at the very time this one was sent, believed as newer, let the gate send
        one request too many (test_pacing's third 429 under load). Without `claimed`, by `sent`."""
        if claimed is not None:
            return claimed != self.counts
        return sent is not None and sent < self.at


class ThrottleStopped(AzureError):
    """The run was stopped (Ctrl-C, SIGTERM) while a request waited for its subscription's gate:
    it is not sent, so a throttled rollout stops as promptly as any other."""


@dataclass
class ThrottleStats:
    """What throttling did: counted per subscription, for reports and the benchmark."""

    throttled: Dict[str, int] = field(default_factory=dict)  # 429s received
    retried: Dict[str, int] = field(default_factory=dict)  # 429s retried
    gave_up: int = 0  # requests answered with a 429 after MAX_RETRIES
    waited_seconds: float = 0.0
    paced: int = 0  # requests held back to spread them over the bucket's refill (no 429 needed)

    def to_dict(self) -> Dict[str, Any]:
        return {"throttled": sum(self.throttled.values()), "retried": sum(self.retried.values()),
                "gave_up": self.gave_up, "waited_seconds": round(self.waited_seconds, 3), "paced": self.paced,
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
        self.stop: Optional[threading.Event] = None  # set by the run's owner: waits give up when it is set

    def _gate(self, key: Tuple[str, str]) -> _Gate:
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate()
        return gate

    def acquire(self, subscription: str, kind: str) -> int:
        """Wait until the subscription's gate is open and its bucket (as last reported, refilled at
        the learnt rate) has a token no request in flight has claimed. When the count runs low the
        requests are spread at the refill rate, one token at a time, instead of all being sent the
        moment a Retry-After ends; with the rate still unknown, one request at a time probes, and
        the first request of a gate goes alone (its answer tells what the bucket holds). Returns the
        claim: pass it to `release` as `claimed` (it tells whether a later count was read while the
        request was in flight)."""
        key = (subscription.lower(), kind)
        waited, held = 0.0, False
        while True:
            self._check_stop(subscription)
            with self._changed:
                pause = self._step(key)
                if pause == 0:
                    self.stats.waited_seconds += waited
                    self.stats.paced += int(held)
                    return self._gate(key).counts
                held = True
                if pause < 0:
                    self._changed.wait(self.slice)
                    continue
            pause = min(max(pause, MIN_PAUSE), NAP_SECONDS)  # re-check: an answer may have taught a faster rate
            if self.stop is not None:
                self.clock.wait(self.stop, pause)
            else:
                self.clock.sleep(pause)
            waited += pause

    def try_acquire(self, subscription: str, kind: str) -> float:
        """One look at the gate, never waiting: 0.0 when a request may go now (it is then counted in
        flight, as by `acquire`), else the seconds to wait on the clock before looking again, or a
        negative number while only an in-flight answer can tell (`acquire` is this, waited out)."""
        with self._changed:
            return self._step((subscription.lower(), kind))

    def _step(self, key: Tuple[str, str]) -> float:
        """`try_acquire` with the lock held."""
        gate = self._gate(key)
        now = self.clock.now()
        available = gate.available(now)
        window_wait = gate.window_wait(now)
        if gate.blocked_until > now:
            return gate.blocked_until - now
        if window_wait != 0:
            return window_wait  # the window still holds as many as it allows (< 0: the ones in flight)
        if (available is None and (gate.heard or gate.in_flight == 0)) or (
                available is not None and available >= 1) or (gate.rate is None and gate.in_flight == 0) \
                or gate.window_returned(now):
            gate.in_flight += 1
            return 0.0
        if gate.rate is None or available is None or gate.ceiling() < 1:
            # wait for an in-flight answer: to tell what is left, or because requests in flight hold
            # every token the bucket can refill (waiting on the clock would spin)
            return -1.0
        return (1.0 - available) / max(MIN_RATE, gate.rate)

    def _check_stop(self, subscription: str) -> None:
        if self.stop is not None and self.stop.is_set():
            raise ThrottleStopped(f"stopped while waiting for subscription {subscription}'s throttle: "
                                  "the request was not sent")

    def release(self, subscription: str, kind: str, status: Optional[int], headers: Any,
                sent: Optional[float] = None, claimed: Optional[int] = None) -> Optional[float]:
        """Record an answer; returns the seconds to back off when it was a 429 (the gate is then
        closed): its Retry-After, or without one BACKOFF_FIRST doubled per 429 in a row. `sent`:
        when its request was sent (on the clock), so a slow answer does not teach a fast refill;
        `claimed`: what `acquire` returned for it."""
        key = (subscription.lower(), kind)
        with self._changed:
            gate = self._gate(key)
            gate.in_flight = max(0, gate.in_flight - 1)
            gate.heard = gate.heard or status is not None
            now = self.clock.now()
            remaining = remaining_count(headers, kind)
            backoff = None
            if status == 429:
                gate.in_a_row += 1
                retry_after = retry_after_seconds(_header(headers, "Retry-After"), self.clock.now)
                if retry_after is None:
                    backoff = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (gate.in_a_row - 1))
                else:
                    backoff = min(retry_after, RETRY_AFTER_MAX)
                    gate.learn_window(now, backoff)
                if gate.rate is not None and gate.blocked_until <= now:  # once per pause, not per answer
                    # it was sent too early: the refill is slower than we thought (never below a
                    # token per BACKOFF_MAX: a wait stays bounded)
                    gate.rate = max(1.0 / BACKOFF_MAX, gate.rate * 0.5)
                elif backoff > 0 and retry_after:
                    gate.rate = max(MIN_RATE, 1.0 / backoff)  # a first guess: one token per Retry-After
                gate.blocked_until = max(gate.blocked_until, now + backoff)
                # when the pause ends one token is back (that is what Retry-After says); the next ones
                # come at the learnt rate: one request goes, the others are spread, none burst
                gate.tokens, gate.at, gate.answered, gate.sent = 1.0, gate.blocked_until, 0, None
                gate.counts += 1
                gate.lowered = False
                sub = subscription.lower()
                self.stats.throttled[sub] = self.stats.throttled.get(sub, 0) + 1
            elif status is not None:
                gate.in_a_row = 0
                gate.history.append(now if sent is None else sent)
                if remaining is not None:
                    gate.note_clump(remaining, now)
                    gate.learn(remaining, now, sent, claimed)
                else:
                    gate.answered += 1
            self._changed.notify_all()
            return backoff

    def note_retry(self, subscription: str) -> None:
        with self._changed:
            sub = subscription.lower()
            self.stats.retried[sub] = self.stats.retried.get(sub, 0) + 1

    def policy(self) -> Any:
        """An azure-core HTTPPolicy for `per_retry_policies`: gate, send, and on a 429 wait and resend."""
        from azure.core.pipeline.policies import HTTPPolicy  # SDK imported lazily

        throttle = self

        class SubscriptionThrottlePolicy(HTTPPolicy[Any, Any]):
            def send(self, request: Any) -> Any:
                http = request.http_request
                found = _SUBSCRIPTION.search(http.url.split("?")[0])
                if not found:
                    return self.next.send(request)
                THROTTLE_GAVE_UP.set(False)
                subscription = found.group(1)
                kind = READS if http.method.upper() in ("GET", "HEAD") else WRITES
                body = http.body if hasattr(http.body, "seek") else None
                position = body.tell() if body is not None else None
                attempt = 0
                while True:
                    claimed = throttle.acquire(subscription, kind)
                    sent = throttle.clock.now()
                    try:
                        response = self.next.send(request)
                    except BaseException:
                        throttle.release(subscription, kind, None, {})
                        raise
                    status = response.http_response.status_code
                    backoff = throttle.release(subscription, kind, status, response.http_response.headers, sent,
                                               claimed)
                    if backoff is None:
                        return response
                    if attempt >= throttle.max_retries:
                        with throttle._changed:
                            throttle.stats.gave_up += 1
                        THROTTLE_GAVE_UP.set(True)  # the retry policy above does not start over
                        return response
                    attempt += 1
                    throttle.note_retry(subscription)
                    if body is not None and position is not None:
                        body.seek(position)

        return SubscriptionThrottlePolicy()


def remaining_count(headers: Any, kind: str) -> Optional[int]:
    """The lowest remaining count an answer reports for its kind: ARM's
    `x-ms-ratelimit-remaining-subscription-reads|writes` and every Compute policy of
    `x-ms-ratelimit-remaining-resource` (`Microsoft.Compute/<Policy>;<n>`, one header per policy --
    which HTTP clients join with commas -- or several comma-separated in one). None: none reported."""
    counts = []
    arm = _int(_header(headers, REMAINING_HEADER.format(kind)))
    if arm is not None:
        counts.append(arm)
    for value in (_header(headers, RESOURCE_HEADER) or "").split(","):
        found = _POLICY_COUNT.search(value)
        if found:
            counts.append(int(found.group(1)))
    return min(counts) if counts else None


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
