"""Local Azure Instance Metadata Service (IMDS): scheduled events and instance metadata for one VM.

    group = PlacementGroup(clock=SYSTEM_CLOCK, started_ttl=60.0, auto_start=True)
    eid = group.add_event("Terminate", ["myvmss_3"])          # NotBefore = now + 5 min
    app = ImdsEmulator(group, vm_name="myvmss_3", vmss_name="myvmss")
    with EmulatorServer(app) as server:                      # server.url -> http://127.0.0.1:PORT
        ...  # VMSS_TERMINATE_IMDS_URL=server.url for the agent

Several `ImdsEmulator`s over one `PlacementGroup` are the VMs of one placement group: each sees all
events (as in Azure) and every approval is recorded with the approving VM's name
(`group.approvals`, `group.foreign_approvals()`).

IMDS rules enforced, from the reference docs (checked in this order):
  * rate limit: more than `rate_limit` requests in a sliding `rate_window` (1 s) per VM -> 429;
    `rate_limit=None` or 0 disables it (real monotonic time);
  * `X-Forwarded-For` present (any value) -> 400; `Metadata: true` missing -> 400
    `{"error": "Bad request. Required metadata header not specified"}` (the value is compared
    case-insensitively: clients send `True` too, and the docs only promise to refuse a missing header);
  * a query parameter given twice -> 400;
  * unknown path -> 404, wrong verb -> 405 (GET everywhere, POST also on scheduledevents);
  * api-version missing or not one of *that endpoint's* versions -> 400 with `error` and
    `newest-versions` (`/metadata/versions` is unversioned);
  * `/metadata/instance/...` leaf with `format=json` (the default) -> 400; `format=text` gives the value.
  * the first Scheduled Events request waits `first_call_delay` real seconds (IMDS: "up to two
    minutes"), as do requests arriving during that wait.

Scheduled events: the api-version shapes each event (Description from 2019-04-01, EventSource from
2019-08-01, DurationInSeconds from 2020-07-01; Terminate hidden before 2019-01-01, Preempt before
2017-11-01; 2017-03-01 prefixes resource names with `_`).

Approval POST `{"StartRequests": [{"EventId": ...}]}`: 200 (empty body) when every EventId is known,
even if already approved or Started; 400 for a malformed body (anything but exactly that shape:
not a list, empty, a non-string EventId, extra keys). **An unknown EventId gets 400 and
nothing in that request is approved** (real IMDS leaves this undocumented; the doc promises 200 only
"if it's passed a valid event ID"). Why 400: a silent 200 would let a client believe a stale or
mistyped approval released its VM; a 404 could be mistaken for "no IMDS here". All-or-nothing keeps
a half-applied request from hiding the mistake. Unknown attempts are still recorded (`accepted=False`).

Fault injection comes from the server, before this app runs: `server.faults.add(status=410)`,
`server.faults.add(status=500, times=3, path_contains="scheduledevents")`,
`server.faults.add(delay=2.0)` (slow answer), `server.faults.add(garbage=True)` (200, not JSON),
`server.faults.add(status=429, headers={"Retry-After": "1"}, method="POST")`.

Admin endpoint (emulator only, NOT part of IMDS; no Metadata header, no rate limit, no api-version):
    GET    /emulator/events                  {"DocumentIncarnation": n, "Events": [...newest shape + StartedAt]}
    POST   /emulator/events                  body {"EventType": "Terminate", "Resources": ["myvmss_3"],
                                              optional NotBefore (RFC 1123 / epoch) | NotBeforeIn (seconds),
                                              EventId, EventStatus, Description, EventSource,
                                              DurationInSeconds}  -> 201 {"EventId": ...}
    GET    /emulator/events/{id}             -> 200 event (404 if unknown)
    PATCH  /emulator/events/{id}             same keys, partial -> 200 event
    DELETE /emulator/events/{id}             -> 204 (404 if unknown)
    POST   /emulator/events/{id}/start       -> 200 event (Started)
    GET    /emulator/approvals               {"Approvals": [{"EventId", "VmName", "At", "Accepted", "Foreign"}]}
    GET    /emulator                         this VM's name and the routes above
e.g. `curl -X POST -d '{"EventType":"Terminate","Resources":["myvmss_3"]}' http://127.0.0.1:PORT/emulator/events`.
Pass `admin=False` to serve IMDS paths only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from vmss_terminate.scheduled_events import EVENT_TYPES, MINIMUM_NOTICE, format_not_before
from vmss_terminate_sim.emulator.imds.admin import handle_admin
from vmss_terminate_sim.emulator.imds.events import Approval, EmulatedEvent, PlacementGroup
from vmss_terminate_sim.emulator.imds.instance import (
    NotFound,
    as_text,
    is_leaf,
    make_identity,
    select,
)
from vmss_terminate_sim.emulator.imds.ratelimit import FirstCallGate, SlidingWindowLimiter
from vmss_terminate_sim.emulator.imds.replies import error_reply, no_route
from vmss_terminate_sim.emulator.imds.versions import (
    INSTANCE_VERSIONS,
    SCHEDULED_EVENTS_VERSIONS,
    bad_version_body,
    scheduled_events_document,
    shape_compute,
)
from vmss_terminate_sim.emulator.routes import Route, match_route, path_params, path_pattern
from vmss_terminate_sim.emulator.server import Request, Response

__all__ = [
    "Approval", "EVENT_TYPES", "EmulatedEvent", "ImdsEmulator", "MINIMUM_NOTICE", "PlacementGroup",
    "format_not_before",
]

METADATA_HEADER_MISSING = "Bad request. Required metadata header not specified"
FORWARDED_REJECTED = "Bad request. X-Forwarded-For header is not allowed"
DUPLICATE_PARAMETER = "Bad request. Duplicate query parameter"
LEAF_NEEDS_TEXT = "Bad request. Query parameter format=json is not supported for leaf nodes; use format=text"
BAD_FORMAT = "Bad request. format must be json or text"
BAD_START_REQUEST = "Bad request. Expected {\"StartRequests\": [{\"EventId\": \"<id>\"}, ...]}"
TOO_MANY_REQUESTS = "Too many requests"

EVENTS_PATH = "/metadata/scheduledevents"
INSTANCE_PATH = "/metadata/instance"
VERSIONS_PATH = "/metadata/versions"
ADMIN_PREFIX = "/emulator"
_VERSIONS = path_pattern(re.escape(VERSIONS_PATH))
_EVENTS = path_pattern(re.escape(EVENTS_PATH))
_INSTANCE = path_pattern(re.escape(INSTANCE_PATH) + "(?P<node>/.*)?")


class ImdsEmulator:
    """IMDS as seen from one VM (`vm_name`) of a placement group; an App for `EmulatorServer`.

    `vmss_name` defaults to the VM name before its last `_`; `resource_id` to the Uniform
    instance id (`.../virtualMachineScaleSets/{vmss}/virtualMachines/{n}`) or a plain VM id.
    `rate_limit` requests per `rate_window` seconds (None/0: unlimited); `first_call_delay` real
    seconds for the first Scheduled Events request. `compute` overrides/extends compute fields;
    `identity`: the rest of the VM's identity as `make_identity` takes it (`subscription_id`,
    `resource_group`, `location`, `private_ip`).
    """

    def __init__(
        self,
        group: PlacementGroup,
        vm_name: str,
        vmss_name: Optional[str] = None,
        resource_id: Optional[str] = None,
        rate_limit: Optional[float] = 5.0,
        first_call_delay: float = 0.0,
        *,
        rate_window: float = 1.0,
        admin: bool = True,
        compute: Optional[Dict[str, Any]] = None,
        **identity: Any,
    ) -> None:
        if not vm_name:
            raise ValueError("vm_name is required")
        self.group = group
        self.vm_name = vm_name
        self.identity = make_identity(vm_name, vmss_name, resource_id, group.id, extra_compute=compute, **identity)
        self.limiter = SlidingWindowLimiter(rate_limit, rate_window)
        self.first_call = FirstCallGate(first_call_delay)
        self.admin_enabled = admin
        # The IMDS route table; each handler is called as handler(request, **the pattern's groups).
        self.routes: List[Route] = [
            Route("GET", _VERSIONS, self._versions),
            Route("GET", _EVENTS, self._scheduled_events),
            Route("POST", _EVENTS, self._scheduled_events),
            Route("GET", _INSTANCE, self._instance),
        ]

    @property
    def vmss_name(self) -> str:
        return self.identity.vmss_name

    @property
    def resource_id(self) -> str:
        return self.identity.resource_id

    def handle(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        if self.admin_enabled and (path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")):
            return handle_admin(self, request, path)
        if not self.limiter.allow():
            return error_reply(429, TOO_MANY_REQUESTS)
        rejected = self._check_request(request)
        if rejected is not None:
            return rejected
        found = match_route(self.routes, request.method, path)
        if found.route is None or found.match is None:
            return no_route(found.allowed)
        return found.route.handler(request, **path_params(found.match))

    # -- request hygiene -------------------------------------------------------------------

    @staticmethod
    def _check_request(request: Request) -> Optional[Response]:
        if request.header("X-Forwarded-For") is not None:
            return error_reply(400, FORWARDED_REJECTED)
        if (request.header("Metadata") or "").strip().lower() != "true":
            return error_reply(400, METADATA_HEADER_MISSING)
        seen: Dict[str, int] = {}
        for key, values in request.query.items():
            seen[key.lower()] = seen.get(key.lower(), 0) + len(values)
        duplicates = sorted(k for k, n in seen.items() if n > 1)
        if duplicates:
            return error_reply(400, f"{DUPLICATE_PARAMETER}: {', '.join(duplicates)}")
        return None

    def _versions(self, request: Request) -> Response:
        return Response.json(200, {"apiVersions": list(INSTANCE_VERSIONS)})

    # -- scheduled events --------------------------------------------------------------------

    def _scheduled_events(self, request: Request) -> Response:
        version = request.param("api-version")
        if version not in SCHEDULED_EVENTS_VERSIONS:
            return Response.json(400, bad_version_body(SCHEDULED_EVENTS_VERSIONS))
        self.first_call.pass_through()
        self.group.tick()
        if request.method == "POST":
            return self._approve(request)
        incarnation, events = self.group.snapshot()
        return Response.json(200, scheduled_events_document(incarnation, [e.to_imds() for e in events], version))

    def _approve(self, request: Request) -> Response:
        event_ids = parse_start_requests(request)
        if event_ids is None:
            return error_reply(400, BAD_START_REQUEST)
        unknown = self.group.approve_many(event_ids, self.vm_name)
        if unknown:
            return error_reply(400, f"Bad request. Unknown EventId: {', '.join(unknown)}")
        return Response(200, b"", {"Content-Type": "application/json; charset=utf-8"})

    # -- instance metadata -------------------------------------------------------------------

    def _instance(self, request: Request, node: Optional[str]) -> Response:
        version = request.param("api-version")
        if version not in INSTANCE_VERSIONS:
            return Response.json(400, bad_version_body(INSTANCE_VERSIONS))
        fmt = (request.param("format") or "json").lower()
        if fmt not in ("json", "text"):
            return error_reply(400, BAD_FORMAT)
        document = self.identity.document()
        document["compute"] = shape_compute(document["compute"], version)
        segments: List[str] = [s for s in (node or "").split("/") if s]
        try:
            node = select(document, segments)
        except NotFound:
            return error_reply(404, "Not found")
        if fmt == "text":
            return Response.text(200, as_text(node))
        if is_leaf(node):
            return error_reply(400, LEAF_NEEDS_TEXT)
        return Response.json(200, node)


def parse_start_requests(request: Request) -> Optional[List[str]]:
    """EventIds of an approval body, or None when it is malformed.

    Exactly the documented shape `{"StartRequests": [{"EventId": "<id>"}, ...]}`: a non-empty list
    of objects whose only key is a non-empty string EventId. Extra keys are malformed too (the doc
    gives no others): an agent sending more than the documented body should fail here, not in Azure.
    """
    try:
        data = request.json()
    except ValueError:  # includes undecodable bytes
        return None
    if not isinstance(data, dict) or set(data) != {"StartRequests"}:
        return None
    start_requests = data["StartRequests"]
    if not isinstance(start_requests, list) or not start_requests:
        return None
    ids: List[str] = []
    for item in start_requests:
        if not isinstance(item, dict) or set(item) != {"EventId"}:
            return None
        if not isinstance(item["EventId"], str) or not item["EventId"]:
            return None
        ids.append(item["EventId"])
    return ids
