"""The event model and the ownership rule (pure functions; no HTTP needed)."""

from __future__ import annotations

import pytest

from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.events import Event, EventsDocument, MalformedDocument, owns, parse_not_before, parse_types


def test_document_with_unknown_fields_and_types_is_tolerated() -> None:
    doc = EventsDocument.from_json({
        "DocumentIncarnation": 7, "NewTopLevel": {"x": 1},
        "Events": [
            {"EventId": "A", "EventType": "Terminate", "ResourceType": "VirtualMachine", "Resources": ["vmss_1"],
             "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"},
            {"EventId": "B", "EventType": "Hibernate", "Resources": ["vmss_2"], "EventStatus": "Started",
             "NotBefore": "", "Description": "d", "EventSource": "User", "DurationInSeconds": "9", "Future": True},
        ],
    })
    a, b = doc.events
    assert doc.incarnation == 7
    assert a.not_before == 1474309787.0 and a.description is None and a.duration_in_seconds is None
    assert b.event_type == "Hibernate" and b.not_before is None and b.started
    assert b.duration_in_seconds == 9 and b.raw["Future"] is True


@pytest.mark.parametrize("payload", [[], {"Events": "x"}, {"DocumentIncarnation": 1}, "x"])
def test_malformed_documents_are_rejected(payload: object) -> None:
    with pytest.raises(MalformedDocument):
        EventsDocument.from_json(payload)


def test_an_unreadable_entry_does_not_hide_the_others() -> None:
    doc = EventsDocument.from_json({"Events": [{"NoId": 1}, 7, {"EventId": "A", "Resources": ["vm_1"]}]})
    assert [e.event_id for e in doc.events] == ["A"] and doc.skipped == 2


@pytest.mark.parametrize("resources,name,expected", [
    (["vmss_10"], "vmss_1", False),
    (["vmss_1"], "vmss_10", False),
    (["vmss_1", "vmss_10"], "vmss_1", True),
    (["myvmss_1a2b3c4d"], "myvmss_1a2b3c4d", True),
    (["myvmss_1a2b3c4d"], "myvmss_1a2b3c4", False),
    (["MyVMSS_3"], "myvmss_3", True),          # Azure names are case-insensitive
    (["myvmss_3 "], "myvmss_3", False),         # whole names only, no trimming tricks
    (["xmyvmss_3"], "myvmss_3", False),
    ([], "myvmss_3", False),
    (["myvmss_3"], "", False),
])
def test_ownership_is_an_exact_case_insensitive_element_match(resources: list, name: str, expected: bool) -> None:
    assert owns(resources, name) is expected


@pytest.mark.parametrize("spelling", ["webvm\u017fs_1", "webvm\u00df_1", "WEBVM\u017fS_1", "webvmss_\u0661",
                                      "webvmss_1\u0130", "\u212aubevm_1"])
def test_ownership_never_folds_a_non_ascii_spelling_onto_ours(spelling: str) -> None:
    ours = "kubevm_1" if spelling.startswith("\u212a") else "webvmss_1"
    assert not owns([spelling], ours)
    event = Event.from_json({"EventId": "E", "EventType": "Terminate", "Resources": [ours, spelling]})
    assert event.others(ours) == [spelling]  # another VM: the event is shared, never approved by default


def test_types_statuses_and_event_ids_compare_ascii_case_insensitively_only() -> None:
    event = Event.from_json({"EventId": "ab", "EventType": "TERMINATE", "EventStatus": "\u017fcheduled",
                             "Resources": ["vm_1"]})
    assert event.event_type == "Terminate" and not event.scheduled
    doc = EventsDocument.from_json({"Events": [{"EventId": "\u212a1"}]})
    assert doc.get("k1") is None and doc.get("\u212a1") is not None
    assert parse_types("reboot,FREEZE") == ("Reboot", "Freeze")
    with pytest.raises(UsageError):
        parse_types("\u0280eboot")


def test_shared_event_lists_the_other_vms() -> None:
    event = Event.from_json({"EventId": "E", "EventType": "Terminate", "Resources": ["vmss_1", "VMSS_2"]})
    assert event.others("VMSS_1") == ["VMSS_2"]


def test_not_before_formats() -> None:
    assert parse_not_before("") is None
    assert parse_not_before("garbage") is None
    assert parse_not_before("2016-09-19T18:29:47Z") == 1474309787.0


def test_parse_types() -> None:
    assert parse_types("terminate, Reboot") == ("Terminate", "Reboot")
    assert parse_types("none") == ()
    assert len(parse_types("all")) == 5
    with pytest.raises(UsageError):
        parse_types("Terminate,Reboo")
