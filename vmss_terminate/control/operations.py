"""Waiting for an Azure long-running operation (a PATCH's, a manualupgrade's), always bounded.

ARM answers a write with a link to watch (`Azure-AsyncOperation`, else `Location`, else the
resource's own `provisioningState`). We poll it ourselves rather than through the SDK's poller so
that every wait:

* ends: past `timeout` seconds (`--wait-timeout`, default 1800) it raises `OperationStillRunning`
  naming what is still running and the operation's URL; the caller adds how to check or resume;
* reads the status once at once (as azure-core's poller, and so az, does: an operation done by
  then costs no wait), then waits exactly what the last status answer's `Retry-After` asks -- never
  longer -- and without one backs off: the first interval is the connection's polling interval
  (0.05 s on loopback, else 1 s), doubling after each answer without Retry-After up to 20 times the
  first (at most 30 s: 1 s on loopback, 20 s against Azure), so that a stuck operation is polled a
  few times a minute, never ten times a second;
* runs on an injectable clock (tests wait for nothing);
* follows links on the ARM endpoint's origin only (`control/origin.py`): both links of an answer
  are checked before the first poll, also the one the wait would not follow.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional
from urllib.parse import urlsplit

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.arm_errors import ArmRequestError, json_object, one_line
from vmss_terminate.control.origin import OriginGuard
from vmss_terminate.errors import AzureError

DEFAULT_TIMEOUT = 1800.0
DEFAULT_FIRST_INTERVAL = 1.0
"""Seconds before the first poll when neither the answer (Retry-After) nor the connection says."""
MAX_INTERVAL = 30.0
MAX_BACKOFF = 20.0
"""The interval grows to at most this many times the first one (and MAX_INTERVAL)."""
BACKOFF = 2.0
_RUNNING_STATES = ("updating", "creating", "deleting", "accepted", "running", "inprogress")


@dataclass(frozen=True)
class OperationWait:
    """How long to wait for one operation (`wait_timeout` seconds on `clock`'s scale)."""

    wait_timeout: float = DEFAULT_TIMEOUT
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False)


DEFAULT_WAIT = OperationWait()


class OperationStillRunning(AzureError):
    """The operation was still running when the wait ended: Azure may well complete it."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


Get = Callable[[str], Any]
"""get(url) -> an azure-core HttpResponse (status_code, headers, text()), errors already raised."""


def await_operation(get: Get, answer: Any, *, method: str, url: str, what: str, guard: OriginGuard,
                    first_interval: Optional[float], wait: OperationWait) -> None:
    """Wait until the operation `answer` (ARM's answer to `method url`) started is done.

    Failed or Canceled raises ArmRequestError ("Code: message (long-running operation Failed)");
    still running past `wait.wait_timeout` raises OperationStillRunning (`what` names the operation).
    """
    headers = answer.headers
    carrier = f"the answer to {method} {_path(url)} (HTTP {answer.status_code})"
    links = {name: headers.get(name) for name in ("Azure-AsyncOperation", "Location")}
    for name, link in links.items():
        if link:
            guard.check_link(link, f"the {name} header of {carrier}")
    if links["Azure-AsyncOperation"]:
        poll_url, done = str(links["Azure-AsyncOperation"]), _status_done
    elif links["Location"] and answer.status_code == 202:
        poll_url, done = str(links["Location"]), _location_done
    elif _provisioning(answer) in _RUNNING_STATES:
        poll_url, done = url, _provisioning_done
    else:
        return  # finished with the answer itself
    _poll(get, poll_url, done, what, guard, first_interval, wait)


def _poll(get: Get, poll_url: str, done: Callable[[Any], bool], what: str, guard: OriginGuard,
          first_interval: Optional[float], wait: OperationWait) -> None:
    """Read the status at once (as azure-core's poller does: an operation that is already done costs
    no wait), then wait what the last answer's Retry-After asks, else the backoff, and read again."""
    clock = wait.clock
    deadline = clock.now() + wait.wait_timeout
    interval = first_interval if first_interval else DEFAULT_FIRST_INTERVAL
    longest = min(MAX_INTERVAL, interval * MAX_BACKOFF)
    while True:  # the last look is at the deadline: a wait of 0 s still polls once
        response = get(poll_url)
        if done(response):
            return
        now = clock.now()
        if now >= deadline:
            raise OperationStillRunning(
                f"{what} is still running in Azure after {wait.wait_timeout:g} s (--wait-timeout; operation "
                f"{poll_url})", poll_url)
        moved = response.headers.get("Location") if response.status_code == 202 and done is _location_done else None
        if moved:
            guard.check_link(str(moved), f"the Location header of the answer to GET {_path(poll_url)} (HTTP 202)")
            poll_url = str(moved)
        retry_after = retry_after_seconds(response.headers.get("Retry-After"), clock.now)
        clock.sleep(min(retry_after if retry_after is not None else interval, deadline - now))
        if retry_after is None:
            interval = min(interval * BACKOFF, longest)


def _status_done(response: Any) -> bool:
    """An Azure-AsyncOperation status answer: Succeeded ends, Failed/Canceled raise, others wait."""
    body = json_object(response.content, f"the operation status ({_path(response.request.url)}) answered "
                                        f"{response.status_code}")
    status = str(body.get("status") or "")
    if status.lower() == "succeeded":
        return True
    if status.lower() in ("failed", "canceled", "cancelled"):
        raise _failed(body, status)
    return False


def _location_done(response: Any) -> bool:
    """A Location answer: 202 still running; 200/201/204 done (errors were raised by `get`)."""
    return bool(response.status_code != 202)


def _provisioning_done(response: Any) -> bool:
    state = _provisioning(response)
    if state in ("failed", "canceled"):
        raise ArmRequestError(f"the resource's provisioningState is {state.capitalize()} "
                              "(long-running operation Failed)", state.capitalize(), response.status_code)
    return state not in _RUNNING_STATES


def _provisioning(response: Any) -> str:
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        return ""
    properties = body.get("properties") if isinstance(body, dict) else None
    state = properties.get("provisioningState") if isinstance(properties, dict) else None
    return str(state).lower() if state else ""


def _failed(body: Dict[str, Any], status: str) -> ArmRequestError:
    found = body.get("error")
    error: Dict[str, Any] = found if isinstance(found, dict) else {}
    code = str(error.get("code") or status)
    message = error.get("message") or f"the long-running operation ended {status}"
    return ArmRequestError(one_line(f"{code}: {message} (long-running operation {status})"), code, 200)


def retry_after_seconds(value: Optional[str], now: Callable[[], float] = time.time) -> Optional[float]:
    """Seconds from a Retry-After value (a number of seconds or an HTTP date, counted from `now`,
    the caller's clock); None when absent, unreadable (`inf`, `nan`, over 32 characters) or not in
    the future (then the caller's backoff applies). The one reader for both the LRO poll loop and
    the fleet throttle."""
    text = str(value).strip() if value is not None else ""
    if not text or len(text) > 32:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now()
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _path(url: str) -> str:
    return urlsplit(url).path or url
