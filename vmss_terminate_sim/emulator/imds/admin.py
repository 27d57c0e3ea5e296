"""The emulator's own admin endpoint under `/emulator/...`: add, change, start and remove events
and read approvals of a *running* emulator (e.g. from curl while testing a drain hook).

It is deliberately outside the IMDS rules (no Metadata header, api-version or rate limit) and
under a path IMDS never uses, so it can't be confused with real IMDS behaviour. Routes are listed
in `ADMIN_ROUTES` below, in `app.py`'s module docstring and at `GET /emulator`.
"""

from __future__ import annotations

from typing import Any, Dict, Protocol

from vmss_terminate.errors import UsageError
from vmss_terminate_sim.emulator.imds.events import Approval, EmulatedEvent, PlacementGroup, event_fields_from_mapping
from vmss_terminate_sim.emulator.imds.replies import error_reply, no_route
from vmss_terminate_sim.emulator.routes import Route, match_route, path_params, path_pattern
from vmss_terminate_sim.emulator.server import Request, Response


class AdminTarget(Protocol):
    """What the admin routes need of the emulator serving them: the VM it is and the placement group
    it shows (`ImdsEmulator` is one). Why a protocol: the app dispatches to these routes, so they
    must not import the app back."""

    @property
    def vm_name(self) -> str: ...

    @property
    def group(self) -> PlacementGroup: ...


ROUTES = [
    "GET /emulator/events",
    "POST /emulator/events",
    "GET /emulator/events/{id}",
    "PATCH /emulator/events/{id}",
    "DELETE /emulator/events/{id}",
    "POST /emulator/events/{id}/start",
    "GET /emulator/approvals",
    "GET|POST|DELETE /emulator/faults",
]


def event_json(event: EmulatedEvent) -> Dict[str, Any]:
    """The newest IMDS shape plus the emulator's own bookkeeping."""
    data = event.to_imds()
    data["StartedAt"] = event.started_at
    return data


def approval_json(approval: Approval) -> Dict[str, Any]:
    return {"EventId": approval.event_id, "VmName": approval.vm_name, "At": approval.at,
            "Accepted": approval.accepted, "Foreign": approval.foreign}


def handle_admin(app: AdminTarget, request: Request, path: str) -> Response:
    """Answer one `/emulator/...` request (bad input 400, unknown event 404, wrong verb 405)."""
    path = "/" + "/".join(part for part in path.split("/") if part)
    found = match_route(ADMIN_ROUTES, request.method, path)
    if found.route is None or found.match is None:
        return no_route(found.allowed, routes=ROUTES)
    app.group.tick()  # answers reflect the clock, like IMDS reads do
    try:
        return found.route.handler(app, request, **path_params(found.match))
    except KeyError:
        return error_reply(404, "no such event")
    except UsageError as exc:
        return error_reply(400, str(exc))


def _index(app: AdminTarget, request: Request) -> Response:
    return Response.json(200, {"vmName": app.vm_name, "routes": ROUTES})


def _list_approvals(app: AdminTarget, request: Request) -> Response:
    return Response.json(200, {"Approvals": [approval_json(a) for a in app.group.approvals]})


def _list_events(app: AdminTarget, request: Request) -> Response:
    incarnation, events = app.group.snapshot()
    return Response.json(200, {"DocumentIncarnation": incarnation, "Events": [event_json(e) for e in events]})


def _add_event(app: AdminTarget, request: Request) -> Response:
    eid = app.group.add_event(**event_fields_from_mapping(_body(request), app.group.clock))
    return Response.json(201, {"EventId": eid})


def _get_event(app: AdminTarget, request: Request, event_id: str) -> Response:
    event = app.group.get(event_id)
    if event is None:
        raise KeyError(event_id)
    return Response.json(200, event_json(event))


def _change_event(app: AdminTarget, request: Request, event_id: str) -> Response:
    fields = event_fields_from_mapping(_body(request), app.group.clock, new=False)
    if "event_id" in fields:
        raise UsageError("EventId cannot be changed")
    app.group.update_event(event_id, **fields)
    return _get_event(app, request, event_id)


def _remove_event(app: AdminTarget, request: Request, event_id: str) -> Response:
    app.group.remove_event(event_id)
    return Response(204)


def _start_event(app: AdminTarget, request: Request, event_id: str) -> Response:
    app.group.start_event(event_id)
    return _get_event(app, request, event_id)


_EVENT = "/emulator/events/(?P<event_id>[^/]+)"
# The admin route table; each handler is called as handler(app, request, **the pattern's groups).
ADMIN_ROUTES = [
    Route("GET", path_pattern("/emulator"), _index),
    Route("GET", path_pattern("/emulator/approvals"), _list_approvals),
    Route("GET", path_pattern("/emulator/events"), _list_events),
    Route("POST", path_pattern("/emulator/events"), _add_event),
    Route("GET", path_pattern(_EVENT), _get_event),
    Route("PATCH", path_pattern(_EVENT), _change_event),
    Route("DELETE", path_pattern(_EVENT), _remove_event),
    Route("POST", path_pattern(_EVENT + "/start"), _start_event),
]


def _body(request: Request) -> Any:
    try:
        return request.json()
    except ValueError:
        raise UsageError("the body must be a JSON object") from None
