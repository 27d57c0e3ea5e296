"""The agent's one HTTP/retry helper: every IMDS request goes through `ImdsClient`.

Rules that hold for every request, because IMDS and its docs demand them:
- `Metadata: true` always; never `X-Forwarded-For` (IMDS rejects it);
- no proxy, whatever HTTP_PROXY / http_proxy / ALL_PROXY say (`Session.trust_env=False` plus
  explicit `None` proxies), because IMDS must be reached directly;
- redirects are never followed: a 3xx means something between us and IMDS is not IMDS;
- every request is bounded in total, connect to last byte (connect timeout + read timeout; the
  first Scheduled Events call may take up to 2 minutes, the service is enabled by it, so it gets a
  long one), and is abandoned at once when the caller's `stop` is set (`_Watch`): a body sent a
  byte at a time cannot hold the agent, and SIGTERM works during any request;
- an answer larger than MAX_BODY_BYTES (1 MiB; real documents are a few KB) is an IMDS fault;
- at most `max_per_second` requests in any one-second window (IMDS allows 5/s per VM, then 429);
- 410 (retry up to 70 s), 429 (Retry-After), 5xx, connection errors (refused, reset and cut off are
  told apart), timeouts, oversize answers and malformed JSON are retried with bounded exponential backoff and jitter; every wait goes through the clock.
- every answer (or failure) is told to `observers` as (method, endpoint, outcome): the agent's
  metrics count IMDS requests by outcome from it.

The bytes travel through a `transport`, a requests adapter (`requests.adapters.BaseAdapter`): by
default `_WatchedAdapter` (real sockets that `_Watch` can cut); a test or an embedding program may
pass its own (e.g. the emulators' in-process transport, no socket at all). Every rule above is the
client's, not the transport's, so it holds whatever transport carries the request.

`api_version="latest"` asks IMDS which versions it serves (a request without api-version is
answered 400 with `newest-versions`) and uses the newest that serves Scheduled Events.

The approval POST has a guard at this lowest layer: it only ever posts an EventId that is in the
latest document this client fetched *and* lists our VM name in its Resources, unless the caller
explicitly passes `allow_foreign=True` (the CLI's `--force`). Defence in depth: a bug upstream
cannot release another VM.

Stale answers: IMDS is served by replicas, and one may lag. A document whose `DocumentIncarnation`
is older than the newest this client has seen is never handed to the caller nor used by the guard
(it is retried like a 5xx, outcome `stale`): an older document may lack the VM that a newer one
added to a Terminate, and approving on it would release that VM undrained. Only when every answer
for STALE_RESET_SECONDS (and at least STALE_RESET_ANSWERS answers) is older is the lower number
taken as IMDS having started counting again (logged), so a reset cannot blind the agent for good.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import random
import re
import threading
import time
from collections import deque
from contextlib import nullcontext
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Callable, ContextManager, Deque, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

import requests
import requests.adapters

from vmss_terminate import __version__
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import UsageError, VmssTerminateError
from vmss_terminate.pipeline.backoff import Backoff
from vmss_terminate.pipeline.events import UNREADABLE, EventsDocument, MalformedDocument, owns, same_name
from vmss_terminate.pipeline.watched import Watch, WatchedAdapter
from vmss_terminate.scheduled_events import DEFAULT_API_VERSION, SCHEDULED_EVENTS_VERSIONS, TERMINATE_SINCE

log = logging.getLogger(__name__)

DEFAULT_IMDS_URL = "http://169.254.169.254"
IMDS_URL_ENV = "VMSS_TERMINATE_IMDS_URL"
MIN_API_VERSION = TERMINATE_SINCE  # the first Scheduled Events version with Terminate
LATEST = "latest"  # --api-version latest: the newest version IMDS serves, asked at start
INSTANCE_API_VERSION = "2021-02-01"
EVENTS_PATH = "/metadata/scheduledevents"
INSTANCE_PATH = "/metadata/instance"

GONE_RETRY_SECONDS = 70.0  # the IMDS doc: on 410 "retry after some time for a max of 70 seconds"
_NO_PROXY: Dict[str, Any] = {"http": None, "https": None}
MAX_BODY_BYTES = 1 << 20  # real Scheduled Events / instance documents are a few KB; more is an IMDS fault
_SNIPPET_BYTES = 4096  # of an error answer: enough for its message
_FORBIDDEN_HEADERS = ("x-forwarded-for",)
STALE_RESET_SECONDS = 120.0  # only older answers for this long (monotonic): IMDS restarted its count
STALE_RESET_ANSWERS = 10     # ... and at least this many of them in a row


class ImdsError(VmssTerminateError):
    """IMDS failed. `retryable` says whether waiting and asking again can help."""

    def __init__(self, message: str, status: Optional[int] = None, retryable: bool = True,
                 retry_after: Optional[float] = None, outcome: str = "error", body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.outcome = outcome  # the metrics label: timeout, connection_error, throttled, gone, ...
        self.body = body        # the answer of a refused (4xx) request, for callers that read it


class ForeignEventError(VmssTerminateError):
    """Refused to POST an approval for an event that does not name this VM (the guard).

    `absent` is True when the EventId is simply not in the latest document (it left, or was never
    there) rather than naming other VMs; `others` lists the other VMs of a shared event.
    """

    def __init__(self, message: str, absent: bool = False, others: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.absent = absent
        self.others = list(others)  # non-empty: ours, but shared with these VMs


class Stopped(VmssTerminateError):
    """The caller's stop event was set while waiting to retry."""


def resolve_imds_url(url: Optional[str] = None) -> str:
    """--imds-url, else $VMSS_TERMINATE_IMDS_URL, else http://169.254.169.254; UsageError if not http(s)."""
    if url is not None and not url.strip():
        raise UsageError("empty --imds-url: pass http://HOST[:PORT], or leave it out for "
                         "$VMSS_TERMINATE_IMDS_URL or http://169.254.169.254")
    value = (url or os.environ.get(IMDS_URL_ENV) or DEFAULT_IMDS_URL).strip().rstrip("/")
    if not re.match(r"^https?://[^/\s?#@]+$", value):
        raise UsageError(f"invalid IMDS URL {value!r}: expected http://HOST[:PORT] with no path")
    try:
        port = urlsplit(value).port
        valid = bool(urlsplit(value).hostname) and (port is None or 0 < port < 65536)
    except ValueError:  # a port that is not a number or out of range
        valid = False
    if not valid:
        raise UsageError(f"invalid IMDS URL {value!r}: expected http://HOST[:PORT] with no path")
    return value


def check_imds_api_version(version: str) -> str:
    """The Scheduled Events api-version: `latest`, or YYYY-MM-DD not older than 2019-01-01 (older
    versions have no Terminate events). Every documented version from 2019-01-01 on is accepted."""
    text = str(version).strip()
    if text.lower() == LATEST:
        return LATEST
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", text):
        raise UsageError(f"invalid api-version {text!r}: expected YYYY-MM-DD, e.g. {DEFAULT_API_VERSION}")
    try:
        datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise UsageError(f"invalid api-version {text!r}: not a date, e.g. {DEFAULT_API_VERSION}") from None
    if text < MIN_API_VERSION:
        raise UsageError(
            f"api-version {text} is older than {MIN_API_VERSION}, which has no Terminate events; "
            f"use {DEFAULT_API_VERSION} or newer"
        )
    return text


class RateLimiter:
    """At most `limit` requests in any `window` seconds (a sliding log; thread-safe).

    Real monotonic time on purpose, not the injectable clock: the IMDS limit (5/s per VM) is
    enforced in real time, also when a sandbox runs the agent on a fast ScaledClock.
    """

    def __init__(self, limit: int = 4, window: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.limit = max(1, int(limit))
        self.window = float(window)
        self._monotonic = monotonic
        self._sleep = sleep
        self._sent: Deque[float] = deque()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        while True:
            with self._lock:
                now = self._monotonic()
                while self._sent and now - self._sent[0] >= self.window:
                    self._sent.popleft()
                if len(self._sent) < self.limit:
                    self._sent.append(now)
                    return
                wait = self.window - (now - self._sent[0])
            self._sleep(max(wait, 0.001))  # pacing requests, not synchronisation


def _json_int(text: str) -> Any:
    """A JSON integer; one longer than Python converts (4300 digits) is read as a float (inf)
    rather than failing the whole document over one field of one entry."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _compute_of(data: Any) -> Dict[str, Any]:
    """Instance metadata's `compute` object (MalformedDocument, so retried, when there is none)."""
    compute = data.get("compute") if isinstance(data, dict) else None
    if not isinstance(compute, dict):
        raise MalformedDocument("instance metadata has no compute object")
    return compute


def _incarnation(document: EventsDocument) -> Optional[int]:
    """DocumentIncarnation as a number to order documents by; None when it is not one."""
    value = document.incarnation
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _retry_after(value: Optional[str], clock: Clock) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or HTTP date), capped at 60."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - clock.now()
        except (TypeError, ValueError, IndexError):
            return None
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), 60.0)


class ImdsClient:
    """Talk to IMDS (or the local emulator at `base_url`) by the rules in the module docstring."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_version: str = DEFAULT_API_VERSION,
        clock: Clock = SYSTEM_CLOCK,
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
        first_call_timeout: float = 130.0,
        max_per_second: int = 4,
        backoff_cap: float = 10.0,
        transport: Optional[requests.adapters.BaseAdapter] = None,
        rng: Optional[random.Random] = None,
    ) -> None:
        self.base_url = resolve_imds_url(base_url)
        self.api_version = check_imds_api_version(api_version)
        self.clock = clock
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.first_call_timeout = first_call_timeout
        self.backoff_cap = backoff_cap
        self.limiter = RateLimiter(limit=max_per_second, window=1.0)
        self._rng = rng or random.Random()
        self._transport = transport or _WatchedAdapter()
        self._session = requests.Session()
        for prefix in ("http://", "https://"):  # every request goes through the one transport
            self._session.mount(prefix, self._transport)
        self._session.trust_env = False  # never a proxy from the environment, never .netrc
        self._session.proxies = {}
        self._session.headers.update({"Metadata": "true", "User-Agent": f"vmss-terminate/{__version__}"})
        self._events_called = False
        self._lock = threading.Lock()
        self._last_document: Optional[EventsDocument] = None
        self._newest: Optional[int] = None  # the highest DocumentIncarnation seen
        self._stale_run: Optional[Tuple[float, int]] = None  # (monotonic start, answers): older ones in a row
        self._version_lock = threading.Lock()
        self.observers: List[Callable[[str, str, str], None]] = []  # (method, endpoint, outcome)
        self.discovered: Optional[Tuple[str, List[str]]] = None  # latest: (chosen, what IMDS listed)

    # -- public API ---------------------------------------------------------------------------

    @property
    def last_document(self) -> Optional[EventsDocument]:
        with self._lock:
            return self._last_document

    def get_events(self, retry_for: Optional[float] = GONE_RETRY_SECONDS,
                   stop: Optional[threading.Event] = None,
                   on_retry: Optional[Callable[[ImdsError, float], None]] = None) -> EventsDocument:
        """The current Scheduled Events document (retried; `retry_for=None` retries until `stop`)."""
        version = self.resolve_api_version(retry_for, stop, on_retry)
        with self._lock:
            first = not self._events_called
        timeout = self.first_call_timeout if first else self.read_timeout
        document: EventsDocument = self._call("GET", EVENTS_PATH, {"api-version": version}, None, timeout,
                                              retry_for, stop, on_retry, parse=self._current_document)
        return document

    def resolve_api_version(self, retry_for: Optional[float] = GONE_RETRY_SECONDS,
                            stop: Optional[threading.Event] = None,
                            on_retry: Optional[Callable[[ImdsError, float], None]] = None) -> str:
        """The api-version in use; `latest` is resolved (once) by asking IMDS."""
        with self._version_lock:
            if self.api_version == LATEST:
                self.api_version = self._discover_version(retry_for, stop, on_retry)
            return self.api_version

    def _discover_version(self, retry_for: Optional[float], stop: Optional[threading.Event],
                          on_retry: Optional[Callable[[ImdsError, float], None]]) -> str:
        """Ask without api-version (IMDS: 400 with `newest-versions`); try the versions it lists,
        newest first, then the documented Scheduled Events versions; the first answered 200 wins."""
        offered: List[str] = []
        try:
            self._call("GET", EVENTS_PATH, {}, None, self.first_call_timeout, retry_for, stop, on_retry, parse=None)
        except ImdsError as exc:
            if exc.status != 400:
                raise
            offered = _newest_versions(exc.body)
        candidates = sorted({v for v in offered if v >= MIN_API_VERSION}, reverse=True)
        candidates += [v for v in reversed(SCHEDULED_EVENTS_VERSIONS) if v >= MIN_API_VERSION and v not in candidates]
        for version in candidates:
            try:
                self._call("GET", EVENTS_PATH, {"api-version": version}, None, self.first_call_timeout,
                           retry_for, stop, on_retry, parse=EventsDocument.from_json)
            except ImdsError as exc:
                if exc.status == 400:  # listed for IMDS as a whole, not served for Scheduled Events
                    continue
                raise
            self.discovered = (version, offered)
            return version
        self.discovered = (DEFAULT_API_VERSION, offered)
        return DEFAULT_API_VERSION

    def vm_name(self, retry_for: Optional[float] = GONE_RETRY_SECONDS,
                stop: Optional[threading.Event] = None,
                on_retry: Optional[Callable[[ImdsError, float], None]] = None) -> str:
        """This VM's name from instance metadata `compute.name` (e.g. `myvmss_3`)."""

        def parse(data: Any) -> str:
            name = _compute_of(data).get("name")
            if not isinstance(name, str) or not name or UNREADABLE in name:
                raise MalformedDocument("instance metadata has no (readable) compute.name")
            return name

        name: str = self._call("GET", INSTANCE_PATH, {"api-version": INSTANCE_API_VERSION}, None,
                               self.read_timeout, retry_for, stop, on_retry, parse=parse)
        return name

    def compute(self, retry_for: Optional[float] = GONE_RETRY_SECONDS,
                stop: Optional[threading.Event] = None,
                on_retry: Optional[Callable[[ImdsError, float], None]] = None) -> Dict[str, Any]:
        """Instance metadata `compute` (resourceId, osProfile.computerName, ...: --kubernetes finds
        its node by them)."""
        compute: Dict[str, Any] = self._call("GET", INSTANCE_PATH, {"api-version": INSTANCE_API_VERSION}, None,
                                             self.read_timeout, retry_for, stop, on_retry, parse=_compute_of)
        return compute

    def approve(self, event_id: str, vm_name: str, allow_foreign: bool = False,
                retry_for: Optional[float] = GONE_RETRY_SECONDS,
                stop: Optional[threading.Event] = None,
                on_retry: Optional[Callable[[ImdsError, float], None]] = None,
                allow_shared: bool = False, event_type: Optional[str] = None) -> None:
        """POST `{"StartRequests": [{"EventId": event_id}]}` for one event, after the guard.

        Right before every attempt the document is fetched again and the guard re-checked on it,
        so Resources that changed since the caller decided (another VM added, or ours removed)
        stop the POST. `allow_shared` permits other VMs next to ours; `event_type` (if given) must
        still be the event's type. `allow_foreign` (`agent approve --force`) skips all checks.
        """
        self.guard_approval(event_id, vm_name, allow_foreign, allow_shared, event_type)
        body = json.dumps({"StartRequests": [{"EventId": event_id}]})
        version = self.resolve_api_version(retry_for, stop, on_retry)

        def before_send() -> Optional[str]:
            """The body to send: the EventId as the re-checked document spells it."""
            if allow_foreign:
                return None
            self._refresh_document(stop)
            spelled = self.guard_approval(event_id, vm_name, allow_foreign, allow_shared, event_type)
            return json.dumps({"StartRequests": [{"EventId": spelled}]})

        self._call("POST", EVENTS_PATH, {"api-version": version}, body, self.read_timeout,
                   retry_for, stop, on_retry, parse=None, before_send=before_send)

    def guard_approval(self, event_id: str, vm_name: str, allow_foreign: bool = False,
                       allow_shared: bool = False, event_type: Optional[str] = None) -> str:
        """Raise ForeignEventError unless the latest fetched document has `event_id` naming `vm_name`
        (and, unless `allow_shared`, no other VM; every entry with that EventId counts). Returns the
        EventId as that document spells it (GUIDs compare case-insensitively; its letter case may
        change between answers): what the POST names."""
        if allow_foreign:
            return event_id
        document = self.last_document
        matches = document.all_with_id(event_id) if document is not None else []
        if not matches:
            raise ForeignEventError(
                f"refusing to approve {event_id}: it is not in the latest scheduled events document", absent=True)
        if len({event.event_id for event in matches}) > 1:  # two spellings in one answer: which is it?
            raise ForeignEventError(f"refusing to approve {event_id}: the document spells it "
                                    f"{' and '.join(sorted({e.event_id for e in matches}))}")
        resources = [r for event in matches for r in event.resources]
        if not all(owns(event.resources, vm_name) for event in matches):
            raise ForeignEventError(
                f"refusing to approve {event_id}: it is for {', '.join(resources) or 'no VM'}, "
                f"not this VM ({vm_name})")
        others = sorted({r for r in resources if not same_name(r, vm_name)})
        if others and not allow_shared:
            raise ForeignEventError(
                f"refusing to approve {event_id}: it also names {', '.join(others)}; approving would "
                f"release them too", others=others)
        if event_type is not None and any(event.event_type != event_type for event in matches):
            raise ForeignEventError(
                f"refusing to approve {event_id}: it is now a {matches[0].event_type}, not a {event_type}")
        return matches[0].event_id

    def _refresh_document(self, stop: Optional[threading.Event] = None) -> None:
        """One GET (no retry of its own: the caller's loop retries) to re-check right before a POST.
        A stale answer raises (retryable): the POST waits for a current document."""
        self._send("GET", EVENTS_PATH, {"api-version": self.resolve_api_version()}, None,
                   self.read_timeout, self._current_document, stop)

    def _current_document(self, data: Any) -> EventsDocument:
        """Parse an answer and remember it as the document the guard checks approvals against --
        unless it is older than the newest seen (ImdsError `stale`, retried; module docstring)."""
        document = EventsDocument.from_json(data)
        incarnation = _incarnation(document)
        with self._lock:
            self._events_called = True  # the first, slow, call is done
            newest = self._newest
            if incarnation is not None and newest is not None and incarnation < newest:
                now = self.clock.monotonic()
                since, answers = self._stale_run or (now, 0)
                self._stale_run = (since, answers + 1)
                if now - since < STALE_RESET_SECONDS or answers + 1 < STALE_RESET_ANSWERS:
                    raise ImdsError(f"stale answer: DocumentIncarnation {incarnation} is older than {newest}, "
                                    f"already seen (a lagging IMDS replica?); not acted on", outcome="stale")
                log.warning("IMDS has answered only DocumentIncarnation %s (older than %s) for %.0fs: taken "
                            "as IMDS counting again", incarnation, newest, now - since)
                newest = None
            self._stale_run = None
            if incarnation is not None and (newest is None or incarnation > newest):
                self._newest = incarnation
            self._last_document = document
        return document

    def close(self) -> None:
        self._session.close()

    # -- one request, retried ---------------------------------------------------------------------

    def _call(self, method: str, path: str, params: Dict[str, str], body: Optional[str], read_timeout: float,
              retry_for: Optional[float], stop: Optional[threading.Event],
              on_retry: Optional[Callable[[ImdsError, float], None]], parse: Optional[Callable[[Any], Any]],
              before_send: Optional[Callable[[], Optional[str]]] = None) -> Any:
        backoff = Backoff(cap=self.backoff_cap, rng=self._rng)
        started = self.clock.now()
        gone_since: Optional[float] = None
        while True:
            try:
                sent = body
                if before_send is not None:
                    sent = before_send() or body
                return self._send(method, path, params, sent, read_timeout, parse, stop)
            except ImdsError as exc:
                if not exc.retryable:
                    raise
                now = self.clock.now()
                if exc.status == 410:
                    gone_since = now if gone_since is None else gone_since
                else:
                    gone_since = None
                budget_start = gone_since if gone_since is not None else started
                delay = backoff.next(at_least=exc.retry_after or 0.0)
                if retry_for is not None and now + delay - budget_start > retry_for:
                    raise
                if on_retry is not None:
                    on_retry(exc, delay)
                else:
                    log.warning("IMDS %s %s failed (%s); retrying in %.1fs", method, path, exc, delay)
                if stop is not None:
                    if self.clock.wait(stop, delay):
                        raise Stopped("stopped while waiting to retry IMDS") from exc
                else:
                    self.clock.sleep(delay)

    def _send(self, method: str, path: str, params: Dict[str, str], body: Optional[str], read_timeout: float,
              parse: Optional[Callable[[Any], Any]], stop: Optional[threading.Event] = None) -> Any:
        """One request; its outcome is told to the observers (ok, or the ImdsError's outcome)."""
        try:
            result = self._send_once(method, path, params, body, read_timeout, parse, stop)
        except ImdsError as exc:
            self._observe(method, path, exc.outcome)
            raise
        self._observe(method, path, "ok")
        return result

    def _observe(self, method: str, path: str, outcome: str) -> None:
        endpoint = path.rsplit("/", 1)[-1]
        for observer in list(self.observers):
            try:
                observer(method, endpoint, outcome)
            except Exception:  # metrics must never break IMDS calls
                log.exception("IMDS observer failed")

    def _send_once(self, method: str, path: str, params: Dict[str, str], body: Optional[str], read_timeout: float,
                   parse: Optional[Callable[[Any], Any]], stop: Optional[threading.Event] = None) -> Any:
        """One request, bounded in total (connect to last byte) and abandoned at once when `stop` is set."""
        headers = {"Metadata": "true"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        for name in list(self._session.headers):
            if name.lower() in _FORBIDDEN_HEADERS:
                del self._session.headers[name]
        self.limiter.acquire()
        total = self.connect_timeout + read_timeout
        with _Watch(total, stop, name="imds-watch") as watch, self._watching(watch):
            try:
                response = self._session.request(
                    method, self.base_url + path, params=params, data=body, headers=headers,
                    timeout=(self.connect_timeout, read_timeout), allow_redirects=False, proxies=_NO_PROXY,
                    stream=True,
                )
                try:
                    status = response.status_code
                    limit = MAX_BODY_BYTES if 200 <= status < 300 and parse is not None else _SNIPPET_BYTES
                    content = _read_capped(response, limit, strict=limit == MAX_BODY_BYTES)
                finally:
                    response.close()
            except requests.RequestException as exc:
                watch.raise_if_fired(exc)
                raise self._transport_error(exc) from exc
            watch.raise_if_fired(None)
        if 300 <= status < 400:
            raise ImdsError(
                f"IMDS answered {status} redirect to {response.headers.get('Location', '?')!r}; "
                f"redirects are never followed (is something intercepting {self.base_url}?)",
                status=status, retryable=False, outcome="redirect")
        if status == 429:
            raise ImdsError("429 too many requests", status=status, outcome="throttled",
                            retry_after=_retry_after(response.headers.get("Retry-After"), self.clock))
        if status == 410 or status >= 500:
            raise ImdsError(f"{status} {response.reason or ''}".strip(), status=status,
                            outcome="gone" if status == 410 else "server_error",
                            retry_after=_retry_after(response.headers.get("Retry-After"), self.clock))
        if status >= 400:
            raise ImdsError(f"IMDS refused {method} {path}: {status} {_snippet(_text(content))}",
                            status=status, retryable=False, outcome="client_error", body=_text(content))
        if parse is None:
            return None
        try:
            return parse(json.loads(_json_text(content), parse_int=_json_int))
        except (ValueError, MalformedDocument, RecursionError, OverflowError, TypeError) as exc:
            # RecursionError: absurdly nested JSON. One odd *entry* never gets here: EventsDocument
            # skips it and keeps the others.
            raise ImdsError(f"malformed answer: {_snippet(str(exc))}", status=status, outcome="malformed") from exc

    def _watching(self, watch: "_Watch") -> ContextManager[None]:
        """Lets the default transport tell `watch` the connection to cut; another transport's
        request is still bounded (`raise_if_fired` after it), it just cannot be cut short."""
        if isinstance(self._transport, _WatchedAdapter):
            return self._transport.watching(watch)
        return nullcontext()

    def _transport_error(self, exc: requests.RequestException) -> "ImdsError":
        """Name what went wrong on the wire: refused, reset, cut off and timed out are different faults."""
        if isinstance(exc, _TooLarge):
            return ImdsError(str(exc), outcome="malformed")
        if isinstance(exc, requests.Timeout):
            return ImdsError(f"timed out: {exc.__class__.__name__}", outcome="timeout")
        causes = _causes(exc)
        if any(isinstance(c, ConnectionResetError) for c in causes):
            return ImdsError(f"connection reset by {self.base_url}", outcome="connection_error")
        if any(isinstance(c, (http.client.RemoteDisconnected, http.client.IncompleteRead)) for c in causes) \
                or isinstance(exc, requests.exceptions.ChunkedEncodingError):
            return ImdsError(f"{self.base_url} closed the connection before the answer was complete",
                             outcome="connection_error")
        if isinstance(exc, requests.ConnectionError):
            return ImdsError(f"cannot connect to {self.base_url}: {exc.__class__.__name__}", outcome="connection_error")
        return ImdsError(f"request failed: {exc.__class__.__name__}")


def _newest_versions(body: str) -> List[str]:
    """`newest-versions` of IMDS's bad-api-version answer (empty if the answer is something else)."""
    try:
        listed = json.loads(body).get("newest-versions")
    except (ValueError, AttributeError):
        return []
    if not isinstance(listed, list):
        return []
    return [v for v in listed if isinstance(v, str) and re.match(r"^\d{4}-\d{2}-\d{2}$", v)]


class _TooLarge(requests.RequestException):
    """The answer is larger than any real IMDS document (see MAX_BODY_BYTES)."""


def _read_capped(response: requests.Response, limit: int, strict: bool) -> bytes:
    """The body, at most `limit` bytes. `strict`: more is an error (_TooLarge), else it is cut off.
    Decoded bytes are counted, so a compressed answer cannot expand past the limit either."""
    declared = response.headers.get("Content-Length", "")
    if strict and declared.isdigit() and int(declared) > limit:
        raise _TooLarge(f"answer of {int(declared)} bytes is larger than the {limit} bytes any IMDS document needs")
    chunks, size = [], 0
    for chunk in response.iter_content(chunk_size=16384):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            if strict:
                raise _TooLarge(f"answer is larger than the {limit} bytes any IMDS document needs")
            break
    return b"".join(chunks)[:limit]


def _json_text(content: bytes) -> str:
    """The answer as text for the JSON reader. A byte that is not valid in its encoding becomes
    U+FFFD rather than failing the whole document: one bad byte in a foreign event's Description
    must not hide our Terminate. A name with U+FFFD is never ours (`events.owns`), an EventId with
    it is an unreadable entry, so the replacement cannot make anything approvable."""
    try:
        encoding = json.detect_encoding(content)
    except (TypeError, ValueError):
        encoding = "utf-8"
    return content.decode(encoding, "replace")


def _text(content: bytes) -> str:
    return content.decode("utf-8", "replace")


def _causes(exc: BaseException, depth: int = 0) -> List[BaseException]:
    """`exc` and what it wraps (requests -> urllib3 -> OSError chains hide the real cause in args)."""
    if depth > 8:
        return []
    found = [exc]
    nested = [a for a in getattr(exc, "args", ()) if isinstance(a, BaseException)]
    nested += [x for x in (getattr(exc, "reason", None), exc.__cause__, exc.__context__) if isinstance(x, BaseException)]
    for inner in nested:
        found += _causes(inner, depth + 1)
    return found


class _Watch(Watch):
    """A `Watch` whose firing is said as the IMDS client's errors."""

    def raise_if_fired(self, cause: Optional[BaseException]) -> None:
        if self.fired == "stopped":
            raise Stopped("stopped during an IMDS request") from cause
        if self.fired == "deadline":
            raise ImdsError(f"no complete answer within {self.total:g}s (connect timeout plus "
                            f"--request-timeout, first byte to last)", outcome="timeout") from cause


_WatchedAdapter = WatchedAdapter


def _snippet(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."

