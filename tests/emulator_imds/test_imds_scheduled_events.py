"""Scheduled events over real HTTP: request rules, version shaping, incarnation, approval life cycle."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.imds.versions import SCHEDULED_EVENTS_VERSIONS

pytestmark = pytest.mark.timeout(30)

EVENTS = "/metadata/scheduledevents"


# -- request rules ------------------------------------------------------------------------------

def test_missing_metadata_header_is_400_with_the_real_message(vm, imds) -> None:
    reply = imds.get(vm, EVENTS, {"api-version": "2019-01-01"}, headers={})
    assert reply.status_code == 400
    assert reply.json() == {"error": "Bad request. Required metadata header not specified"}


@pytest.mark.parametrize("value", ["false", "", "yes"])
def test_metadata_header_must_be_true(vm, imds, value) -> None:
    assert imds.get(vm, EVENTS, {"api-version": "2019-01-01"}, headers={"Metadata": value}).status_code == 400


def test_metadata_header_value_is_case_insensitive(vm, imds) -> None:
    assert imds.get(vm, EVENTS, {"api-version": "2019-01-01"}, headers={"Metadata": "True"}).status_code == 200


def test_any_x_forwarded_for_is_rejected(vm, imds) -> None:
    reply = imds.get(vm, EVENTS, {"api-version": "2019-01-01"},
                     headers={"Metadata": "true", "X-Forwarded-For": "127.0.0.1"})
    assert reply.status_code == 400 and "X-Forwarded-For" in reply.json()["error"]


def test_post_needs_the_header_too(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    reply = imds.post(vm, {"StartRequests": [{"EventId": eid}]}, headers={})
    assert reply.status_code == 400
    assert group.approvals == []


@pytest.mark.parametrize("params", [None, {"api-version": "2021-01-01"}, {"api-version": "latest"},
                                    {"api-version": ""}])
def test_missing_or_unknown_api_version(vm, imds, params) -> None:
    reply = imds.get(vm, EVENTS, params)
    assert reply.status_code == 400
    body = reply.json()
    assert body["error"].startswith("Bad request. api-version is invalid or was not specified")
    assert body["newest-versions"] == ["2020-07-01", "2019-08-01", "2019-04-01"]


def test_duplicate_query_parameter_is_rejected(vm, imds) -> None:
    reply = imds.get(vm, EVENTS + "?api-version=2019-01-01&api-version=2019-01-01")
    assert reply.status_code == 400 and "Duplicate" in reply.json()["error"]
    mixed_case = imds.get(vm, EVENTS + "?api-version=2019-01-01&API-Version=2019-01-01")
    assert mixed_case.status_code == 400


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_wrong_verb_is_405(vm, imds, method) -> None:
    reply = imds.session.request(method, vm.url + EVENTS, params={"api-version": "2019-01-01"},
                                 headers={"Metadata": "true"}, timeout=10)
    assert reply.status_code == 405


def test_every_documented_version_answers(vm, imds) -> None:
    for version in SCHEDULED_EVENTS_VERSIONS:
        assert imds.events(vm, version) == {"DocumentIncarnation": 1, "Events": []}


# -- payload and version shaping ------------------------------------------------------------------

def test_event_payload_at_2019_01_01(vm, imds, group, clock) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"], description="deleting", event_source="User",
                          duration_in_seconds=7)
    doc = imds.events(vm, "2019-01-01")
    assert doc == {
        "DocumentIncarnation": 2,
        "Events": [{
            "EventId": eid,
            "EventType": "Terminate",
            "ResourceType": "VirtualMachine",
            "Resources": ["myvmss_3"],
            "EventStatus": "Scheduled",
            "NotBefore": formatdate(clock.now() + 300, usegmt=True),
        }],
    }


@pytest.mark.parametrize("version, fields", [
    ("2019-01-01", set()),
    ("2019-04-01", {"Description"}),
    ("2019-08-01", {"Description", "EventSource"}),
    ("2020-07-01", {"Description", "EventSource", "DurationInSeconds"}),
])
def test_optional_fields_follow_the_version(vm, imds, group, version, fields) -> None:
    group.add_event("Reboot", ["myvmss_3"], description="Host server is undergoing maintenance.",
                    event_source="Platform", duration_in_seconds=9)
    [event] = imds.events(vm, version)["Events"]
    base = {"EventId", "EventType", "ResourceType", "Resources", "EventStatus", "NotBefore"}
    assert set(event) == base | fields
    expected = {"Description": "Host server is undergoing maintenance.", "EventSource": "Platform",
                "DurationInSeconds": 9}
    assert {k: event[k] for k in fields} == {k: expected[k] for k in fields}


def test_old_versions_hide_event_types_they_did_not_know(vm, imds, group) -> None:
    group.add_event("Terminate", ["myvmss_3"])
    group.add_event("Preempt", ["myvmss_3"])
    group.add_event("Freeze", ["myvmss_3"])

    def types(version: str) -> list:
        return sorted(e["EventType"] for e in imds.events(vm, version)["Events"])

    assert types("2019-01-01") == ["Freeze", "Preempt", "Terminate"]
    assert types("2017-11-01") == ["Freeze", "Preempt"]
    assert types("2017-08-01") == ["Freeze"]


def test_2017_03_01_prepends_underscore_to_resource_names(vm, imds, group) -> None:
    group.add_event("Freeze", ["myvmss_3"])
    assert imds.events(vm, "2017-03-01")["Events"][0]["Resources"] == ["_myvmss_3"]
    assert imds.events(vm, "2017-08-01")["Events"][0]["Resources"] == ["myvmss_3"]


@pytest.mark.parametrize("event_type, notice", [
    ("Freeze", 900), ("Reboot", 900), ("Redeploy", 600), ("Preempt", 30), ("Terminate", 300),
])
def test_default_minimum_notice(vm, imds, group, clock, event_type, notice) -> None:
    group.add_event(event_type, ["myvmss_3"])
    [event] = imds.events(vm, "2020-07-01")["Events"]
    assert event["NotBefore"] == formatdate(clock.now() + notice, usegmt=True)
    assert event["NotBefore"].endswith(" GMT")


def test_explicit_not_before_and_event_id(vm, imds, group) -> None:
    group.add_event("Terminate", ["myvmss_3"], not_before=1_700_000_600.0, event_id="my-id")
    [event] = imds.events(vm)["Events"]
    assert event["EventId"] == "my-id"
    assert event["NotBefore"] == "Tue, 14 Nov 2023 22:23:20 GMT"


# -- incarnation and life cycle -----------------------------------------------------------------

def test_incarnation_increments_on_every_change(vm, imds, group) -> None:
    seen = [imds.events(vm)["DocumentIncarnation"]]
    eid = group.add_event("Terminate", ["myvmss_3"])
    seen.append(imds.events(vm)["DocumentIncarnation"])
    seen.append(imds.events(vm)["DocumentIncarnation"])  # no change, same incarnation
    group.update_event(eid, description="changed")
    seen.append(imds.events(vm)["DocumentIncarnation"])
    group.start_event(eid)
    seen.append(imds.events(vm)["DocumentIncarnation"])
    group.start_event(eid)  # already Started: no change
    seen.append(imds.events(vm)["DocumentIncarnation"])
    group.remove_event(eid)
    seen.append(imds.events(vm)["DocumentIncarnation"])
    assert seen == [1, 2, 2, 3, 4, 4, 5]


def test_approval_starts_event_then_it_disappears_after_ttl(vm, imds, group, clock) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    assert imds.approve(vm, eid).status_code == 200
    doc = imds.events(vm)
    assert doc["DocumentIncarnation"] == 3
    [event] = doc["Events"]
    assert event["EventStatus"] == "Started" and event["NotBefore"] == ""
    clock.advance(59)
    assert len(imds.events(vm)["Events"]) == 1
    clock.advance(1)
    assert imds.events(vm) == {"DocumentIncarnation": 4, "Events": []}


def test_not_before_passing_starts_the_event(vm, imds, group, clock) -> None:
    group.add_event("Preempt", ["myvmss_3"])
    clock.advance(29)
    assert imds.events(vm)["Events"][0]["EventStatus"] == "Scheduled"
    clock.advance(1)
    assert imds.events(vm)["Events"][0]["EventStatus"] == "Started"


def test_without_auto_start_approval_only_records(serve, imds, clock) -> None:
    group = PlacementGroup(clock=clock, auto_start=False)
    server = serve(ImdsEmulator(group, "myvmss_3", rate_limit=None))
    eid = group.add_event("Terminate", ["myvmss_3"])
    assert imds.approve(server, eid).status_code == 200
    clock.advance(3600)
    [event] = imds.events(server)["Events"]
    assert event["EventStatus"] == "Scheduled"
    assert [(a.event_id, a.vm_name) for a in group.approvals] == [(eid, "myvmss_3")]


# -- approvals ----------------------------------------------------------------------------------

def test_approving_twice_is_200_and_both_are_recorded(vm, imds, group, clock) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    assert imds.approve(vm, eid).status_code == 200
    clock.advance(1)
    assert imds.approve(vm, eid).status_code == 200
    approvals = group.approvals
    assert [(a.event_id, a.vm_name, a.at, a.accepted, a.foreign) for a in approvals] == [
        (eid, "myvmss_3", clock.now() - 1, True, False),
        (eid, "myvmss_3", clock.now(), True, False),
    ]


def test_event_id_matches_case_insensitively(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    assert imds.approve(vm, eid.lower()).status_code == 200
    assert group.approvals[0].event_id == eid  # recorded under the canonical id


@pytest.mark.parametrize("body", [
    b"not json", b"\xff\xfe", b"[]", b"{}", b'{"StartRequests": []}', b'{"StartRequests": {"EventId": "x"}}',
    b'{"StartRequests": [{}]}', b'{"StartRequests": [{"EventId": 5}]}', b'{"StartRequests": ["x"]}',
    b'{"StartRequests": [{"EventId": ""}]}',
])
def test_malformed_approval_is_400_and_records_nothing(vm, imds, group, body) -> None:
    group.add_event("Terminate", ["myvmss_3"])
    assert imds.post(vm, body).status_code == 400
    assert group.approvals == []
    assert imds.events(vm)["Events"][0]["EventStatus"] == "Scheduled"


@pytest.mark.parametrize("shape", [
    lambda eid: {"StartRequests": [{"EventId": eid, "Resources": ["myvmss_3"]}]},
    lambda eid: {"StartRequests": [{"EventId": eid}], "Approve": True},
    lambda eid: {"StartRequests": [{"EventId": eid}, {"EventId": eid, "Extra": 1}]},
    lambda eid: {"StartRequests": [{"EventId": [eid]}]},
    lambda eid: {"startrequests": [{"EventId": eid}]},
])
def test_extra_or_misspelt_keys_are_malformed_even_with_a_valid_event_id(vm, imds, group, shape) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    reply = imds.post(vm, shape(eid))
    assert reply.status_code == 400 and reply.json()["error"].startswith("Bad request. Expected")
    assert group.approvals == []
    assert imds.events(vm)["Events"][0]["EventStatus"] == "Scheduled"


def test_unknown_event_id_is_400_and_nothing_in_the_request_is_approved(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    reply = imds.approve(vm, eid, "00000000-0000-0000-0000-000000000000")
    assert reply.status_code == 400 and "Unknown EventId" in reply.json()["error"]
    assert imds.events(vm)["Events"][0]["EventStatus"] == "Scheduled"
    [attempt] = group.approvals
    assert (attempt.event_id, attempt.accepted) == ("00000000-0000-0000-0000-000000000000", False)


def test_approval_with_newest_api_version_and_several_ids(vm, imds, group) -> None:
    a = group.add_event("Freeze", ["myvmss_3"])
    b = group.add_event("Reboot", ["myvmss_3"])
    reply = imds.post(vm, {"StartRequests": [{"EventId": a}, {"EventId": b}]}, version="2020-07-01")
    assert reply.status_code == 200
    assert {e["EventStatus"] for e in imds.events(vm)["Events"]} == {"Started"}


def test_approval_with_bad_api_version_is_rejected(vm, imds, group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    assert imds.post(vm, {"StartRequests": [{"EventId": eid}]}, version="2021-01-01").status_code == 400
    assert group.approvals == []


# -- a placement group shared by two VMs ----------------------------------------------------------

def test_two_vms_see_the_same_events_and_approvals_are_attributed(group, serve, imds) -> None:
    vm0 = serve(ImdsEmulator(group, "myvmss_0", rate_limit=None))
    vm1 = serve(ImdsEmulator(group, "myvmss_1", rate_limit=None))
    mine = group.add_event("Terminate", ["myvmss_0"])
    neighbour = group.add_event("Terminate", ["myvmss_1"])
    assert imds.events(vm0) == imds.events(vm1)
    assert {e["EventId"] for e in imds.events(vm0)["Events"]} == {mine, neighbour}

    assert imds.approve(vm0, mine).status_code == 200
    assert group.foreign_approvals() == []
    assert [a.event_id for a in group.approvals_by("myvmss_0")] == [mine]
    statuses = {e["EventId"]: e["EventStatus"] for e in imds.events(vm1)["Events"]}
    assert statuses == {mine: "Started", neighbour: "Scheduled"}

    # The worst bug: a VM approving its neighbour's event. The emulator allows it (as Azure does) and flags it.
    assert imds.approve(vm0, neighbour).status_code == 200
    [foreign] = group.foreign_approvals()
    assert (foreign.event_id, foreign.vm_name) == (neighbour, "myvmss_0")


def test_an_approval_releases_the_event_for_every_resource(group, serve, imds) -> None:
    vm0 = serve(ImdsEmulator(group, "myvmss_0", rate_limit=None))
    vm1 = serve(ImdsEmulator(group, "myvmss_1", rate_limit=None))
    eid = group.add_event("Freeze", ["myvmss_0", "myvmss_1"])
    assert imds.approve(vm1, eid).status_code == 200
    assert imds.events(vm0)["Events"][0]["EventStatus"] == "Started"
    assert group.foreign_approvals() == []
