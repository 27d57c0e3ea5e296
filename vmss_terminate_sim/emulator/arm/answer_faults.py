"""Answer faults for the ARM emulator: the app answers, then the answer is falsified the way the
fault asks (`--fault foreign-link=ORIGIN`, `link-loop`, `short-rows=N`, `duplicate-rows=N`,
`repeat-skiptoken`; `stuck` is served by the operation route itself, which then does not advance
the operation).

Why: a client that trusts what ARM answers can leak its token to another host, page forever or
pass a gate on data it never read. These faults make each of those answers reproducible, so the
client's refusals are tested against real HTTP, not mocks:

* `foreign-link=ORIGIN`: `nextLink` (list pages), `Azure-AsyncOperation` and `Location` point at
  ORIGIN (same path and query), e.g. another port of 127.0.0.1 that records what reaches it.
* `link-loop`: the page's `nextLink` is the URL of the request itself.
* `short-rows=N`: a Resource Graph page keeps its first N rows and drops `$skipToken`; `count`
  says N, `totalRecords` still counts every row, `resultTruncated` stays "false".
* `duplicate-rows=N`: the first N rows of a Resource Graph page are sent again, their ids in
  upper case (ARM ids are case-insensitive: the same resource).
* `repeat-skiptoken`: a Resource Graph page's `$skipToken` is the one the request sent (a request
  without one is answered normally): with `times=all` paging never advances.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional
from urllib.parse import urlencode, urlsplit

from vmss_terminate_sim.emulator.server import Request, Response

LINK_HEADERS = ("Azure-AsyncOperation", "Location")


def apply(request: Request, response: Response, base: str) -> Response:
    """The app's `response`, falsified as the request's answer fault says (unchanged without one)."""
    fault = request.fault
    if fault is None or not fault.edits_answer:
        return response
    if fault.foreign_link:
        for name in LINK_HEADERS:
            if name in response.headers:
                response.headers[name] = _moved(response.headers[name], fault.foreign_link)
    body = _json(response)
    if body is None:
        return response
    if fault.foreign_link and isinstance(body.get("nextLink"), str):
        body["nextLink"] = _moved(body["nextLink"], fault.foreign_link)
    if fault.link_loop and isinstance(body.get("value"), list):
        query = urlencode([(key, value) for key, values in request.query.items() for value in values])
        body["nextLink"] = f"{base}{request.path}" + (f"?{query}" if query else "")
    rows = body.get("data")
    if isinstance(rows, list) and "totalRecords" in body:
        _graph_page(fault, request, body, rows)
    response.body = json.dumps(body).encode("utf-8")
    return response


def _graph_page(fault: Any, request: Request, body: Dict[str, Any], rows: list) -> None:  # type: ignore[type-arg]
    if fault.short_rows is not None:
        rows = rows[:fault.short_rows]
        body.pop("$skipToken", None)
        body["resultTruncated"] = "false"
    if fault.duplicate_rows:  # Resource Graph counts the repeats in totalRecords (issue 28)
        again = [dict(row, id=str(row.get("id", "")).upper()) for row in rows[:fault.duplicate_rows]]
        rows = rows + again
        body["totalRecords"] = int(body["totalRecords"]) + len(again)
    if fault.stale_rows:
        stale = [_notification_off(row) for row in rows[:fault.stale_rows]]
        body["totalRecords"] = int(body["totalRecords"]) + len(stale)
        rows = stale + rows
    body["data"], body["count"] = rows, len(rows)
    if fault.repeat_skip_token:
        sent = _sent_skip_token(request)
        if sent:
            body["$skipToken"] = sent


def _notification_off(row: Dict[str, Any]) -> Dict[str, Any]:
    """A stale copy of a scale set row: the model as it was before terminate notification was on."""
    copy: Dict[str, Any] = json.loads(json.dumps(row))
    off = {"terminateNotificationProfile": {"enable": False}}
    if "scheduledEventsProfile" in copy:  # a projected row (the audit's columns)
        copy["scheduledEventsProfile"] = off
    profile = (copy.get("properties") or {}).get("virtualMachineProfile")
    if isinstance(profile, dict):  # the resource's own fields
        profile["scheduledEventsProfile"] = off
    return copy


def _sent_skip_token(request: Request) -> Optional[str]:
    try:
        options = json.loads(request.body or b"{}").get("options") or {}
    except (ValueError, AttributeError):
        return None
    token = options.get("$skipToken") if isinstance(options, dict) else None
    return str(token) if token else None


def _moved(url: str, origin: str) -> str:
    """`url` with its scheme and host:port replaced by `origin`."""
    parts = urlsplit(url)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    return origin + tail


def _json(response: Response) -> Optional[Dict[str, Any]]:
    if not response.body or "json" not in response.headers.get("Content-Type", ""):
        return None
    try:
        body = json.loads(response.body)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
