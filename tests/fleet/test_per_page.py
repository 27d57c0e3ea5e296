"""Pay per page, not per scale set: stale-instance counts come from one Resource Graph summary over
`computeresources` (1,000 sets a page); the VM list filtered to `latestModelApplied eq false` is
the fallback for a Resource Graph that refuses the query (400) or whose rows do not report the
property. The counts must equal what ARM says either way."""

from __future__ import annotations

import math
import threading
import time
from typing import Dict

import pytest

from vmss_terminate.control import Connection
from vmss_terminate.fleet import audit
from vmss_terminate.fleet.options import DEFAULT_CONCURRENCY
from vmss_terminate.fleet.rollout import rollout
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.faults import parse_fault_spec

GRAPH = "/providers/Microsoft.ResourceGraph/resources"


@pytest.fixture
def state() -> ArmState:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 60, "subscriptions": 3, "capacity": 8}})
    state.add_scale_set(state.scale_sets()[0].subscription, "rg-flex", "flex", orchestration="Flexible", capacity=2,
                        scheduled_events_profile={"terminateNotificationProfile": {"enable": True}})
    return state


def _truth(state: ArmState) -> Dict[str, int]:
    return {ss.resource_id.lower(): sum(1 for i in ss.live_instances() if not i.latest_model_applied)
            for ss in state.scale_sets() if ss.orchestration == "Uniform"}


def _counts(report) -> Dict[str, int]:  # type: ignore[no-untyped-def]
    return {r.id.lower(): r.stale_instances for r in report.scale_sets if r.enabled and r.uniform}


def test_stale_counts_cost_pages_not_instance_lists(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    state.rg_page_size = 25
    report = audit(connection=conn)
    truth = _truth(state)
    counts = _counts(report)
    assert counts and all(counts[key] == truth[key] for key in counts)
    assert any(counts.values())  # some sets do have stale instances
    assert report.calls["instance_lists"] == 0
    assert [r for r in arm.arm_server.log.all() if "/virtualMachines" in r.path] == []
    summarised = sum(1 for ss in state.scale_sets() if ss.orchestration == "Uniform" and ss.instances)
    assert arm.arm_server.log.count("POST", GRAPH) == math.ceil(61 / 25) + math.ceil(summarised / 25)
    flex = next(r for r in report.scale_sets if r.name == "flex")
    assert flex.stale_instances is None and flex.findings == ["stale-unknown"]  # never read as current


def test_a_resource_graph_without_the_table_falls_back_to_filtered_vm_lists(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    state.rg_compute_resources = False  # Resource Graph answers the summary 400
    report = audit(connection=conn)
    counts = _counts(report)
    truth = _truth(state)
    assert counts and all(counts[key] == truth[key] for key in counts)
    lists = [r for r in arm.arm_server.log.find("GET") if r.path.endswith("/virtualMachines")]
    assert len(lists) == len(counts) == report.calls["instance_lists"]
    assert all(r.query.get("$filter") == ["properties/latestModelApplied eq false"] for r in lists)
    assert report.calls["graph_summary_refused"] == 1


def test_rows_that_do_not_report_the_property_are_never_read_as_current(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    state.rg_model_reported = False  # the summary answers, but no VM carries latestModelApplied
    report = audit(connection=conn)
    counts = _counts(report)
    truth = _truth(state)
    assert any(counts.values()) and all(counts[key] == truth[key] for key in counts)
    assert report.calls["instance_lists"] == len(counts)


def test_the_summary_query_keeps_the_resource_group_selector(arm: ArmServers, conn: Connection) -> None:
    report = audit(Scope.build(resource_groups=["rg-fleet-1"]), connection=conn)
    assert {r.resource_group for r in report.scale_sets} == {"rg-fleet-1"}
    summary = [r for r in arm.arm_server.log.find("POST", GRAPH) if b"computeresources" in r.body]
    assert len(summary) == 1 and b"rg-fleet-1" in summary[0].body
    assert report.calls["instance_lists"] == 0


def test_default_concurrency_runs_a_small_estate_in_one_wave(arm: ArmServers) -> None:
    """All 24 upgrades are in flight at once (each held at ARM's door until the 24th arrives): one
    wave, no set waiting for another -- proven by the requests, not by how fast the machine is (the
    arrival-time spread this test measured before failed on a loaded machine)."""
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 24, "subscriptions": 4, "capacity": 2, "special": False}})
    for ss in state.scale_sets():  # every set needs the PATCH
        ss.vm_profile.pop("scheduledEventsProfile", None)
    arm.reset(state)
    arm.arm_server.faults.add(parse_fault_spec("delay=300,path=/manualupgrade,times=24"))  # held until cleared
    outcome: Dict[str, object] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=rollout(
        timeout=10, connection=Connection(arm_endpoint=arm.arm_url), batch_size="100%")), daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while arm.arm_server.faults.pending() and time.monotonic() < deadline and worker.is_alive():
        threading.Event().wait(0.02)
    in_flight_at_once = 24 - (arm.arm_server.faults.pending() or 0)
    arm.arm_server.faults.clear()  # let them all answer
    worker.join(120)
    assert in_flight_at_once == 24 and DEFAULT_CONCURRENCY >= 24
    result = outcome["result"]
    assert result.ok  # type: ignore[attr-defined]
    assert len(arm.arm_server.log.find("POST", "/manualupgrade")) == 24