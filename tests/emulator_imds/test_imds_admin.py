"""The emulator's admin endpoint: change a running emulator's events without the IMDS rules."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator

pytestmark = pytest.mark.timeout(30)


def test_admin_needs_no_metadata_header_nor_api_version(vm, imds) -> None:
    reply = imds.admin("GET", vm, "")
    assert reply.status_code == 200
    assert reply.json()["vmName"] == "myvmss_3" and "POST /emulator/events" in reply.json()["routes"]
    assert imds.admin("GET", vm, "/events").json() == {"DocumentIncarnation": 1, "Events": []}


def test_add_event_shows_up_in_imds(vm, imds, clock) -> None:
    reply = imds.admin("POST", vm, "/events", json={"EventType": "Terminate", "Resources": ["myvmss_3"],
                                                     "NotBeforeIn": 120, "Description": "scale-in"})
    assert reply.status_code == 201
    eid = reply.json()["EventId"]
    [event] = imds.events(vm, "2020-07-01")["Events"]
    assert event["EventId"] == eid and event["Description"] == "scale-in"
    assert event["NotBefore"] == formatdate(clock.now() + 120, usegmt=True)


def test_add_event_with_rfc1123_not_before_and_own_id(vm, imds) -> None:
    reply = imds.admin("POST", vm, "/events", json={
        "EventType": "Reboot", "Resources": ["myvmss_3"], "EventId": "abc",
        "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "EventSource": "User", "DurationInSeconds": 9})
    assert reply.status_code == 201 and reply.json() == {"EventId": "abc"}
    event = imds.admin("GET", vm, "/events/abc").json()
    # NotBefore already passed, so reading it started the event
    assert event["EventStatus"] == "Started" and event["NotBefore"] == ""


@pytest.mark.parametrize("body", [
    {"EventType": "Explode", "Resources": ["myvmss_3"]},
    {"EventType": "Terminate"},
    {"EventType": "Terminate", "Resources": "myvmss_3"},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "Bogus": 1},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBefore": "tomorrow"},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBeforeIn": "soon"},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBeforeIn": 1e30},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBeforeIn": -1e30},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBeforeIn": True},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBefore": 1e30},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBefore": -1},
    {"EventType": "Terminate", "Resources": ["myvmss_3"], "EventSource": "Alien"},
    ["not", "an", "object"],
])
def test_bad_admin_input_is_400(vm, imds, group, body) -> None:
    reply = imds.admin("POST", vm, "/events", json=body)
    assert reply.status_code == 400 and reply.json()["error"]
    assert group.events() == []
    # the refused input left the emulator serving (an out-of-range time used to mean 500 forever)
    assert imds.admin("GET", vm, "/events").status_code == 200


def test_patch_start_delete(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    patched = imds.admin("PATCH", vm, f"/events/{eid}", json={"Resources": ["myvmss_3", "myvmss_4"]})
    assert patched.status_code == 200 and patched.json()["Resources"] == ["myvmss_3", "myvmss_4"]
    started = imds.admin("POST", vm, f"/events/{eid}/start")
    assert started.status_code == 200 and started.json()["EventStatus"] == "Started"
    assert started.json()["StartedAt"] == group.clock.now()
    fetched = imds.admin("GET", vm, f"/events/{eid}")
    assert fetched.status_code == 200 and fetched.json() == started.json()
    assert "GET /emulator/events/{id}" in imds.admin("GET", vm, "")   .json()["routes"]
    assert imds.admin("DELETE", vm, f"/events/{eid}").status_code == 204
    assert imds.admin("GET", vm, f"/events/{eid}").status_code == 404
    assert imds.events(vm)["Events"] == []
    assert imds.admin("DELETE", vm, f"/events/{eid}").status_code == 404
    assert imds.admin("PATCH", vm, f"/events/{eid}", json={"Description": "x"}).status_code == 404
    assert imds.admin("POST", vm, f"/events/{eid}/start").status_code == 404


def test_patch_cannot_change_the_event_id(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    assert imds.admin("PATCH", vm, f"/events/{eid}", json={"EventId": "other"}).status_code == 400


def test_approvals_list(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_4"])
    imds.approve(vm, eid)
    [approval] = imds.admin("GET", vm, "/approvals").json()["Approvals"]
    assert approval == {"EventId": eid, "VmName": "myvmss_3", "At": group.clock.now(),
                        "Accepted": True, "Foreign": True}


def test_admin_is_outside_the_rate_limit_and_unknown_routes_404(group, serve, imds) -> None:
    server = serve(ImdsEmulator(group, "myvmss_3", rate_limit=1, rate_window=60.0))
    assert {imds.admin("GET", server, "/events").status_code for _ in range(5)} == {200}
    assert imds.admin("GET", server, "/nope").status_code == 404
    assert imds.admin("PUT", server, "/events").status_code == 405
    assert imds.admin("POST", server, "/approvals").status_code == 405
    assert imds.admin("POST", server, "/events/e1").headers["Allow"] == "GET, PATCH, DELETE"
    assert imds.admin("GET", server, "/events/e1/start").headers["Allow"] == "POST"
    assert imds.admin("GET", server, "/events/e1/nope").json()["routes"][0] == "GET /emulator/events"


def test_admin_can_be_turned_off(group, serve, imds) -> None:
    server = serve(ImdsEmulator(group, "myvmss_3", rate_limit=None, admin=False))
    assert imds.admin("GET", server, "/events").status_code == 400  # just an IMDS path without the header
    assert imds.get(server, "/emulator/events").status_code == 404
