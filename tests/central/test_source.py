"""The central source interface: scale set ids, event fields, NotBefore."""

from __future__ import annotations

import pytest

from vmss_terminate.central import CentralEvent, ScaleSetRef, event_from_fields, parse_not_before

SET_ID = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourcegroups/rg/providers/"
          "Microsoft.Compute/virtualmachinescalesets/web")


def test_scale_set_ref_parses_any_case_and_compares_by_key() -> None:
    ref = ScaleSetRef.parse(SET_ID + "/")
    assert (ref.subscription, ref.resource_group, ref.name) == ("00000000-0000-0000-0000-000000000000", "rg", "web")
    assert ref.key == ScaleSetRef.parse(SET_ID.upper().replace("/SUBSCRIPTIONS/", "/subscriptions/")).key.lower()
    assert ref.id.endswith("/providers/Microsoft.Compute/virtualMachineScaleSets/web")


@pytest.mark.parametrize("bad", ["", "/subscriptions/x", SET_ID + "/virtualMachines/0",
                                 SET_ID.replace("virtualmachinescalesets", "virtualMachines")])
def test_scale_set_ref_refuses_other_ids(bad: str) -> None:
    with pytest.raises(ValueError):
        ScaleSetRef.parse(bad)


def test_event_from_fields_round_trips_the_imds_shape() -> None:
    data = {"EventId": "A1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
            "Resources": ["web_1", "web_2"], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
            "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}
    event = event_from_fields(ScaleSetRef.parse(SET_ID), data, source="test")
    assert isinstance(event, CentralEvent) and event.pending
    assert event.fields() == data
    assert event.key == SET_ID.lower() + "/a1"


def test_event_from_fields_names_the_unreadable_field() -> None:
    with pytest.raises(ValueError, match="Resources"):
        event_from_fields(ScaleSetRef.parse(SET_ID), {"EventId": "A", "EventType": "Terminate",
                                                      "EventStatus": "Scheduled", "Resources": "web_1"})
    with pytest.raises(ValueError, match="RFC 1123"):
        parse_not_before("tomorrow")
    assert parse_not_before("") is None


def test_an_event_row_whose_id_names_another_event_id_is_refused() -> None:
    from vmss_terminate.central.graph import event_from_row

    set_id = ("/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/web"
              "/providers/Microsoft.Maintenance/scheduledevents/")
    props = {"EventId": "AAAA-1", "EventType": "Terminate", "EventStatus": "Scheduled", "Resources": ["web_1"],
             "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}
    assert event_from_row({"id": set_id + "aaaa-1", "properties": props}).event_id == "AAAA-1"  # case-insensitive
    with pytest.raises(ValueError, match="properties.EventId"):
        event_from_row({"id": set_id + "BBBB-2", "properties": props})
