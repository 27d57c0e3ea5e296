"""Fleet answers are complete or the command fails: short and looping Resource Graph answers,
duplicate rows, a subscription the credential cannot see, an unreadable instance list; and the
gate's `--ignore-finding`. Faults come from the ARM emulator (docs/emulators.md, answer faults)."""

from __future__ import annotations

import json

import pytest

from vmss_terminate.control import Connection
from vmss_terminate.errors import AzureError, UsageError
from vmss_terminate.fleet import Scope, audit
from vmss_terminate.fleet.session import MAX_GRAPH_PAGES
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.faults import parse_fault_spec

from .conftest import PROD, STAGING, arm_writes, run

UNSEEN = "99999999-0000-0000-0000-000000000009"
GRAPH = "ResourceGraph"


def _fault(arm: ArmServers, spec: str) -> None:
    arm.arm_server.faults.add(parse_fault_spec(spec))


def test_short_resource_graph_answer_fails_naming_the_shortfall(arm: ArmServers) -> None:
    _fault(arm, f"short-rows=5,path={GRAPH}")
    result = run("fleet", "audit", "--detailed-exitcode")
    assert result.exit_code == 1, result.output
    assert "answered 5 of 30 rows (totalRecords 30)" in result.stderr
    assert "the other 25" in result.stderr
    assert result.stdout == ""  # nothing printed as if it were the estate


def test_short_answer_on_a_later_page_fails_too(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    state.rg_page_size = 10
    _fault(arm, f"delay=0.001,path={GRAPH}")  # the first page: answered as usual
    _fault(arm, f"short-rows=3,path={GRAPH}")  # the second: 3 rows and no $skipToken
    with pytest.raises(AzureError, match="answered 13 of 30 rows"):
        audit(connection=conn)


def test_repeating_skip_token_is_a_paging_loop(arm: ArmServers, state: ArmState) -> None:
    state.rg_page_size = 10
    _fault(arm, f"repeat-skiptoken,path={GRAPH},times=all")
    result = run("fleet", "rollout", "--timeout", "10")
    assert result.exit_code == 1, result.output
    assert "paging loop" in result.stderr and "on page 2" in result.stderr
    assert arm.arm_server.log.count("POST", "resources") == 2  # it ended, it did not page on
    assert arm_writes(arm) == []
    assert MAX_GRAPH_PAGES == 1000


def test_duplicate_rows_are_counted_once(arm: ArmServers, conn: Connection) -> None:
    _fault(arm, f"duplicate-rows=4,path={GRAPH}")
    report = audit(connection=conn)
    ids = [r.id.lower() for r in report.scale_sets]
    assert len(ids) == len(set(ids)) == 30
    assert report.calls["duplicate_rows"] == 4


def test_duplicate_rows_are_changed_once_by_a_rollout(arm: ArmServers) -> None:
    _fault(arm, f"duplicate-rows=30,path={GRAPH}")
    result = run("fleet", "rollout", "--subscription", PROD, "-g", "rg-web", "--timeout", "10", "-o", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["sets"]["in_scope"] == 4 and summary["sets"]["changed"] == 3
    assert sum(1 for w in arm_writes(arm) if w.startswith("PATCH")) == 2  # web-disabled, web-5m


@pytest.mark.parametrize("command", [["audit"], ["rollout", "--timeout", "10"]])
def test_a_named_subscription_the_credential_cannot_see_fails(arm: ArmServers, command: list) -> None:  # type: ignore[type-arg]
    result = run("fleet", *command, "--subscription", PROD, "--subscription", UNSEEN)
    assert result.exit_code == 1, result.output
    assert f"subscription {UNSEEN} is not visible to this credential" in result.stderr
    assert "Contoso Production" in result.stderr  # what it can see
    assert arm_writes(arm) == []


def test_an_unreadable_instance_list_marks_that_set_and_fails_the_audit(arm: ArmServers, state: ArmState) -> None:
    state.rg_model_reported = False  # the summary does not say: each set's instance list decides
    _fault(arm, "status=500,method=GET,path=/virtualMachineScaleSets/web-stale/virtualMachines,times=all")
    result = run("fleet", "audit", "--subscription", PROD, "-o", "json", "--detailed-exitcode")
    assert result.exit_code == 1, result.output
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(records) == {"web-compliant", "web-disabled", "web-5m", "web-stale"}  # the others still audited
    assert records["web-stale"]["findings"] == ["unreadable"]
    assert "500" in records["web-stale"]["error"]
    assert records["web-compliant"]["compliant"] is True
    assert "rg-web/web-stale: instance list unreadable" in result.stderr
    assert "audit is incomplete" in result.stderr


def test_ignore_finding_lets_a_gate_pass_over_legitimately_skipped_sets(arm: ArmServers) -> None:
    args = ["fleet", "audit", "--subscription", STAGING, "-g", "rg-batch", "-g", "MC_rg-aks_aks1_westus",
            "--detailed-exitcode"]
    assert run(*args).exit_code == 2
    # batch-force and batch-auto are disabled (non-compliant for real): ignoring spot/aks-managed is not enough
    assert run(*args, "--ignore-finding", "spot", "--ignore-finding", "aks-managed").exit_code == 2
    passing = run(*args, "--name", "batch-[sr]*", "--ignore-finding", "spot")  # batch-spot, batch-repairs
    assert passing.exit_code == 0, passing.output
    assert run(*args, "--name", "batch-[sr]*").exit_code == 2


def test_ignore_finding_stale_unknown_and_bad_codes(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    state.add_scale_set(PROD, "rg-flex", "flex", orchestration="Flexible", capacity=2,
                        scheduled_events_profile={"terminateNotificationProfile": {"enable": True,
                                                                                    "notBeforeTimeout": "PT10M"}})
    report = audit(Scope.build(subscriptions=[PROD], resource_groups=["rg-flex"]), connection=conn)
    assert [r.findings for r in report.scale_sets] == [["stale-unknown"]]
    assert report.failing() and not report.failing(["stale-unknown"])
    with pytest.raises(UsageError, match="unreadable"):
        report.failing(["unreadable"])
    bad = run("fleet", "audit", "--ignore-finding", "unreadable")
    assert bad.exit_code == 2


def test_repeated_rows_counted_in_total_records_are_not_a_shortfall(arm: ArmServers) -> None:
    """Resource Graph counts its repeats in totalRecords (issue 28 item 5): 30 distinct rows + 4
    repeats of 34 is complete, not 'answered 30 of 34 rows'; and the output says repeats were seen."""
    _fault(arm, f"duplicate-rows=4,path={GRAPH}")
    result = run("fleet", "audit")
    assert result.exit_code == 0, result.output
    assert "answered 4 row(s) twice with the same contents, each counted once" in result.stdout


def test_repeated_rows_that_disagree_fail_the_answer(arm: ArmServers, conn: Connection) -> None:
    """A stale first copy (terminate notification off) and the current one (issue 28 item 3): which
    is current cannot be told, so the answer fails -- the rollout then writes nothing."""
    _fault(arm, f"stale-rows=3,path={GRAPH}")
    with pytest.raises(AzureError, match="twice with different contents .*refusing the answer"):
        audit(connection=conn)
    _fault(arm, f"stale-rows=3,path={GRAPH}")
    result = run("fleet", "rollout", "--timeout", "10")
    assert result.exit_code == 1 and "twice with different contents" in result.stderr
    assert arm_writes(arm) == []


def test_a_verdict_says_where_its_facts_came_from(arm: ArmServers, conn: Connection) -> None:
    result = run("fleet", "audit", "-o", "json")
    records = json.loads(result.stdout)
    assert {r["source"] for r in records} == {"resource-graph"}
    assert all(r["source_read_at"].endswith("Z") for r in records)
    table = run("fleet", "audit")
    assert "source: facts from Azure Resource Graph as read at " in table.stdout


def test_a_rollout_says_its_compliant_sets_are_resource_graphs_verdict(arm: ArmServers) -> None:
    """Sets the rollout never read from ARM are not called 'ok' on its own authority (issue 28 item 3):
    the summary says they are compliant per Resource Graph, as read when, and not re-read."""
    result = run("fleet", "rollout", "--subscription", PROD, "-g", "rg-web", "--timeout", "10")
    assert result.exit_code == 0, result.output
    assert "1 already compliant per Resource Graph" in result.stdout
    assert "already compliant: facts from Azure Resource Graph as read at " in result.stdout
    assert "not re-read from ARM by this run" in result.stdout
    data = json.loads(run("fleet", "rollout", "--subscription", PROD, "-g", "rg-web", "--timeout", "10",
                          "-o", "json").stdout)
    assert data["compliant_before_source"].startswith("facts from Azure Resource Graph as read at ")
