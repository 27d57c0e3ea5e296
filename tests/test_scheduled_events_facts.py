"""The agent and the IMDS emulator read Scheduled Events facts from one module."""

from __future__ import annotations

from vmss_terminate import scheduled_events as facts
from vmss_terminate.agent import imds as agent_imds
from vmss_terminate.pipeline import events as agent_events
from vmss_terminate_sim.emulator.imds import events as emulator_events
from vmss_terminate_sim.emulator.imds import instance as emulator_instance
from vmss_terminate_sim.emulator.imds import versions as emulator_versions


def test_agent_and_emulator_share_one_list_of_each_fact() -> None:
    assert agent_events.EVENT_TYPES is facts.EVENT_TYPES is emulator_events.EVENT_TYPES
    assert agent_events.SCHEDULED == emulator_events.SCHEDULED == facts.SCHEDULED
    assert emulator_versions.SCHEDULED_EVENTS_VERSIONS is facts.SCHEDULED_EVENTS_VERSIONS
    assert emulator_instance.DEFAULT_SUBSCRIPTION == facts.DEFAULT_SUBSCRIPTION
    assert agent_imds.DEFAULT_API_VERSION == facts.DEFAULT_API_VERSION in facts.SCHEDULED_EVENTS_VERSIONS


def test_not_before_is_written_in_the_documented_rfc_1123_form_and_read_back() -> None:
    text = facts.format_not_before(1474309787.0)
    assert text == facts.NOT_BEFORE_EXAMPLE
    assert agent_events.parse_not_before(text) == 1474309787.0


def test_each_optional_field_appears_from_its_documented_version() -> None:
    wire = {"EventId": "e", "EventType": "Terminate", "Resources": ["vm_1"], "Description": "d",
            "EventSource": "Platform", "DurationInSeconds": 5}
    for field, since in facts.EVENT_FIELD_SINCE.items():
        before = facts.SCHEDULED_EVENTS_VERSIONS[facts.SCHEDULED_EVENTS_VERSIONS.index(since) - 1]
        assert field in emulator_versions.shape_event(wire, since)
        assert field not in emulator_versions.shape_event(wire, before)
    assert not emulator_versions.event_visible("Terminate", "2017-11-01")
    assert emulator_versions.event_visible("Terminate", facts.TERMINATE_SINCE)


def test_one_record_per_event_type_and_every_view_is_read_from_it() -> None:
    """scheduled_events.EVENT_TYPE_FACTS is the one table: the type list, the notices, the
    versions, departing and node-drain types are views of it, and the policy reads those."""
    from vmss_terminate.pipeline import policy

    table = facts.EVENT_TYPE_FACTS
    assert facts.EVENT_TYPES == tuple(table) == ("Terminate", "Reboot", "Redeploy", "Freeze", "Preempt")
    assert facts.MINIMUM_NOTICE == {"Terminate": 300.0, "Reboot": 900.0, "Redeploy": 600.0, "Freeze": 900.0,
                                    "Preempt": 30.0}
    assert facts.EVENT_TYPE_SINCE == {"Terminate": "2019-01-01", "Preempt": "2017-11-01"}
    assert facts.MAX_TERMINATE_NOTICE == 900.0
    assert policy.DEPARTING is facts.DEPARTING and set(facts.DEPARTING) == {"Terminate", "Preempt"}
    assert facts.NO_NODE_DRAIN == ("Freeze",) and not policy.drains_node("Freeze") and policy.drains_node("Reboot")
    assert all(r.since in facts.SCHEDULED_EVENTS_VERSIONS for r in table.values())
    for name, record in table.items():
        visible = [v for v in facts.SCHEDULED_EVENTS_VERSIONS if emulator_versions.event_visible(name, v)]
        assert visible[0] == record.since  # the emulator serves a type from the version the table names
