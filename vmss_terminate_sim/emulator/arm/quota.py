"""Request quotas for the local ARM emulator, as Azure throttles: token buckets per subscription
and kind (reads = GET/HEAD, writes = PUT/PATCH/POST/DELETE), either ARM's own (per subscription)
or a Compute policy's (requests under /providers/Microsoft.Compute). Off by default.

Why token buckets: they are ARM's throttling algorithm (a bucket of N tokens refilled at R per
second per subscription), and Compute's policies work the same way over their own windows. A
client that paces itself by the remaining headers and honours `Retry-After` on a 429 behaves the
same against this as against Azure. Time comes from the state's clock, so a test with a
ManualClock decides when tokens come back.

Sliding windows (opt-in, `windowSeconds` / `writes=N/Ws`): at most N requests in any W seconds,
each request's token coming back exactly W seconds after it was spent -- the per-hour limits ARM
still documents ("throttled per principal user ID and per hour": 1,200 writes per subscription per
hour, Learn's "Understand how Azure Resource Manager throttles requests", copied in
/work/shared/reference/docs/arm-throttling.md section A) and Compute's windowed policies
(`GetVMScaleSet3Min`, `...30Min`, section D). Unlike a bucket nothing comes back gradually: a burst's
tokens all return together one window later, so a client that learns a refill rate from the
remaining count is misled (issue 28 item 11). The remaining header counts what the window still
allows; a 429's `Retry-After` is the whole seconds until the oldest request in it leaves (at least 1).

Configuration (seed `"quotas"`, `start_arm(quotas=...)`, CLI `--quota`)::

    {"writes": {"bucket": 40, "refillPerSecond": 20}, "reads": {"bucket": 1000, "refillPerSecond": 100}}
    [{"kind": "writes", "bucket": 2, "refillPerSecond": 0.5, "subscription": "<id>"},       # one subscription
     {"kind": "writes", "bucket": 12, "refillPerSecond": 0.2, "computePolicy": "VMScaleSetBatchedVMRequests"}]

    [{"kind": "writes", "bucket": 4, "windowSeconds": 8}]                                   # sliding window

    --quota writes=40/20                          (every subscription)
    --quota writes=2/0.5,subscription=<id>        (that subscription only)
    --quota writes=12/0.2,compute=VMScaleSetBatchedVMRequests
    --quota writes=4/8s                           (a sliding window: 4 writes in any 8 s)

Headers: an ARM quota sends `x-ms-ratelimit-remaining-subscription-reads|writes: N` on every answer
of its kind; a Compute policy sends `x-ms-ratelimit-remaining-resource: Microsoft.Compute/<Policy>;N`,
one header per policy (Microsoft's troubleshooting article) or, with seed `"computeHeaders":
"joined"` (`Quotas.joined`), one header with the policies comma-separated (as observed in the
wild). A refused request spends no token anywhere and gets 429 with `Retry-After` (whole seconds
until a token is back, at least 1): ARM's body `SubscriptionRequestsThrottled`, Compute's
`OperationNotAllowed` with a `TooManyRequests` detail naming the policy.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from vmss_terminate.clock import SYSTEM_CLOCK, Clock

KINDS = ("reads", "writes")
READ_METHODS = ("GET", "HEAD")
RESOURCE_HEADER = "x-ms-ratelimit-remaining-resource"
_SPEC = re.compile(r"^\s*(reads|writes)\s*=\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*(s?)\s*$")
MAX_WINDOW = 86400.0  # seconds: a day is the longest window a quota may have
_POLICY = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,79}$")
_COMPUTE_PATH = re.compile(r"/providers/microsoft\.compute/", re.IGNORECASE)


def header(kind: str) -> str:
    return f"x-ms-ratelimit-remaining-subscription-{kind}"


def kind_of(method: str) -> str:
    return "reads" if method.upper() in READ_METHODS else "writes"


@dataclass(frozen=True)
class Limit:
    """`bucket` tokens, refilled at `refill_per_second` -- or, with `window` seconds, a sliding
    window of `bucket` requests in any `window` seconds; for one subscription or all (None), as
    ARM's quota (policy None) or a Compute policy's."""

    bucket: int
    refill_per_second: float
    kind: str = "writes"
    subscription: Optional[str] = None
    policy: Optional[str] = None
    window: Optional[float] = None

    def __post_init__(self) -> None:
        if self.window is not None:
            if self.bucket < 1 or not 0 < self.window <= MAX_WINDOW:
                raise ValueError(f"a sliding-window quota needs bucket >= 1 and 0 < windowSeconds <= {MAX_WINDOW:g}")
        elif self.bucket < 1 or self.refill_per_second <= 0:
            raise ValueError("a quota needs bucket >= 1 and refillPerSecond > 0")
        if self.kind not in KINDS:
            raise ValueError(f"a quota's kind is one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.policy is not None and not _POLICY.match(self.policy):
            raise ValueError(f"invalid Compute policy name {self.policy!r}: letters and digits, e.g. "
                             "VMScaleSetBatchedVMRequests")

    @property
    def key(self) -> Tuple[str, str, str]:
        return (self.kind, (self.subscription or "").lower(), self.policy or "")

    def applies(self, subscription: str, kind: str, compute: bool) -> bool:
        return (kind == self.kind and (self.subscription is None or self.subscription.lower() == subscription.lower())
                and (self.policy is None or compute))


def _limit(kind: str, value: Mapping[str, Any]) -> Limit:
    subscription = value.get("subscription")
    policy = value.get("computePolicy")
    window = value.get("windowSeconds")
    if window is not None:
        if "refillPerSecond" in value:
            raise ValueError(f"quotas: a {kind} quota has refillPerSecond (a bucket) or windowSeconds (a sliding "
                             "window), not both")
        return Limit(int(value["bucket"]), 0.0, kind, str(subscription) if subscription else None,
                     str(policy) if policy else None, float(window))
    return Limit(int(value["bucket"]), float(value["refillPerSecond"]), kind,
                 str(subscription) if subscription else None, str(policy) if policy else None)


def parse_limits(config: Union[Mapping[str, Any], List[Any]]) -> List[Limit]:
    """The seed's `quotas` (an object keyed by kind, or a list of objects with `kind`) -> limits
    (ValueError when malformed)."""
    entries: List[Tuple[Any, Any]]
    if isinstance(config, Mapping):
        entries = list(config.items())
    elif isinstance(config, list):
        entries = [(item.get("kind") if isinstance(item, Mapping) else None, item) for item in config]
    else:
        raise ValueError("quotas: expected an object keyed by reads/writes, or a list of quota objects")
    limits = []
    for kind, value in entries:
        if kind not in KINDS or not isinstance(value, Mapping):
            raise ValueError(f"quotas: expected {' / '.join(KINDS)} objects with bucket and refillPerSecond (or "
                             "windowSeconds), "
                             f"not {kind!r}")
        try:
            limits.append(_limit(str(kind), value))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"quotas: a {kind} quota needs bucket and refillPerSecond or windowSeconds ({exc})") from None
    return limits


def parse_spec(text: str) -> Limit:
    """`writes=40/20` (bucket 40, 20 per second) or `writes=4/8s` (a sliding window: 4 in any 8 s),
    optionally `,subscription=ID` and/or `,compute=POLICY` -> Limit (ValueError when malformed)."""
    first, *rest = text.split(",")
    match = _SPEC.match(first)
    if not match:
        raise ValueError(f"invalid quota {text!r}: use reads|writes=BUCKET/PERSECOND or reads|writes=COUNT/"
                         "SECONDSs (a sliding window)[,subscription=ID][,compute=POLICY], e.g. writes=40/20 or "
                         "writes=4/8s")
    extra: Dict[str, str] = {}
    for part in rest:
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("subscription", "compute") or not value.strip():
            raise ValueError(f"invalid quota {text!r}: after the bucket, only subscription=ID and compute=POLICY")
        extra[key.strip()] = value.strip()
    if match.group(4):
        return Limit(int(match.group(2)), 0.0, match.group(1), extra.get("subscription"), extra.get("compute"),
                     float(match.group(3)))
    return Limit(int(match.group(2)), float(match.group(3)), match.group(1), extra.get("subscription"),
                 extra.get("compute"))


@dataclass
class Decision:
    """What the quotas say about one request: allowed or not, and the headers of the answer."""

    allowed: bool = True
    retry_after: int = 0
    headers: Dict[str, str] = field(default_factory=dict)
    repeated: List[Tuple[str, str]] = field(default_factory=list)
    refused_by: Optional[Limit] = None


class Quotas:
    """Token buckets per (limit, subscription); `decide` spends a token of every limit that applies
    or, when one of them is empty, none."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, limits: Optional[Iterable[Limit]] = None) -> None:
        self.clock = clock
        self.limits: Dict[Tuple[str, str, str], Limit] = {}
        self.joined = False  # Compute's remaining-resource policies in one comma-separated header
        self._buckets: Dict[Tuple[Tuple[str, str, str], str], Tuple[float, float]] = {}  # -> (tokens, at)
        self._windows: Dict[Tuple[Tuple[str, str, str], str], Deque[float]] = {}  # -> when each spent one
        self._lock = threading.Lock()
        self.configure(limits or [])

    def configure(self, limits: Iterable[Limit]) -> None:
        """Add limits (one with the same kind, subscription and policy is replaced); buckets refill."""
        with self._lock:
            for limit in limits:
                self.limits[limit.key] = limit
            self._buckets.clear()
            self._windows.clear()

    def decide(self, subscription: str, kind: str, path: str) -> Decision:
        """Spend one token of every limit that applies to this request, or refuse it."""
        compute = bool(_COMPUTE_PATH.search(path))
        applying = [limit for limit in self.limits.values() if limit.applies(subscription, kind, compute)]
        decision = Decision()
        if not applying:
            return decision
        with self._lock:
            now = self.clock.now()
            tokens = {}
            for limit in applying:
                key = (limit.key, subscription.lower())
                if limit.window is not None:
                    spent = self._windows.setdefault(key, deque())
                    while spent and spent[0] <= now - limit.window:
                        spent.popleft()  # left the window: its token is back
                    tokens[limit.key] = float(limit.bucket - len(spent))
                    continue
                have, at = self._buckets.get(key, (float(limit.bucket), now))
                tokens[limit.key] = min(float(limit.bucket), have + max(0.0, now - at) * limit.refill_per_second)
            empty = [limit for limit in applying if tokens[limit.key] < 1.0]
            if empty:
                decision.allowed = False
                waits = [self._wait(limit, subscription, tokens[limit.key], now) for limit in empty]
                decision.retry_after = max(1, math.ceil(max(waits)))
                decision.refused_by = empty[0]
            else:
                for limit in applying:
                    tokens[limit.key] -= 1.0
            for limit in applying:
                key = (limit.key, subscription.lower())
                if limit.window is None:
                    self._buckets[key] = (tokens[limit.key], now)
                elif decision.allowed:
                    self._windows[key].append(now)
        self._headers(decision, applying, tokens, kind)
        return decision

    def _wait(self, limit: Limit, subscription: str, tokens: float, now: float) -> float:
        """Seconds until `limit` has a token again for this subscription."""
        if limit.window is None:
            return (1.0 - tokens) / limit.refill_per_second
        spent = self._windows[(limit.key, subscription.lower())]
        return spent[0] + limit.window - now  # the oldest request in the window leaves it

    def _headers(self, decision: Decision, applying: List[Limit], tokens: Dict[Tuple[str, str, str], float],
                 kind: str) -> None:
        arm = [int(tokens[limit.key]) for limit in applying if limit.policy is None]
        if arm:
            decision.headers[header(kind)] = str(min(arm))
        policies = [f"Microsoft.Compute/{limit.policy};{int(tokens[limit.key])}"
                    for limit in applying if limit.policy is not None]
        if policies and self.joined:
            decision.headers[RESOURCE_HEADER] = ",".join(policies)
        elif policies:
            decision.repeated.extend((RESOURCE_HEADER, value) for value in policies)


def throttled_body(limit: Limit, subscription: str, retry_after: int) -> Dict[str, Any]:
    """The 429 body: ARM's for its own quota, Compute's (OperationNotAllowed) for a policy."""
    if limit.policy is None:
        return {"error": {"code": "SubscriptionRequestsThrottled", "message": (
            f"Number of '{limit.kind[:-1]}' requests for subscription '{subscription}' actor 'emulated-principal' "
            f"exceeded. Please try again after '{retry_after}' seconds after additional tokens are available. "
            f"Refer to https://aka.ms/arm-throttling")}}
    detail = {"operationGroup": limit.policy, "allowedRequestCount": limit.bucket}
    return {"error": {
        "code": "OperationNotAllowed",
        "message": "The server rejected the request because too many requests have been received for this "
                   "subscription.",
        "details": [{"code": "TooManyRequests", "target": limit.policy, "message": json.dumps(detail)}],
    }}
