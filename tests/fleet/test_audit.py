"""`vmss_terminate.fleet.audit` and `vmss-terminate fleet audit` against the emulator."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from vmss_terminate.control import Connection
from vmss_terminate.errors import UsageError
from vmss_terminate.fleet import FINDINGS, Scope, audit
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import PROD, STAGING, run

BOTH = Scope.build(subscriptions=[PROD, STAGING])


def _by_name(report):  # type: ignore[no-untyped-def]
    return {r.name: r for r in report.scale_sets}


def test_each_finding_is_reported(arm: ArmServers, conn: Connection) -> None:
    report = audit(BOTH, timeout=10, connection=conn)
    sets = _by_name(report)
    assert sets["web-compliant"].findings == [] and sets["web-compliant"].compliant
    assert sets["web-disabled"].findings == ["disabled"]
    assert sets["web-5m"].findings == ["timeout-differs"]
    assert sets["web-stale"].findings == ["stale-model"] and sets["web-stale"].stale_instances == 2
    assert sets["batch-spot"].findings == ["disabled", "spot"]
    assert sets["aks-nodepool1-12345678-vmss"].findings == ["disabled", "aks-managed"]
    assert sets["batch-force"].findings == ["disabled", "force-deletion"]
    assert sets["batch-repairs"].findings == ["automatic-repairs"]
    assert sets["batch-repairs"].compliant  # a warning, not non-compliance
    seen = {code for r in report.scale_sets for code in r.findings}
    # stale-unknown: tests/fleet/test_unknown_stale.py; unreadable: tests/fleet/test_complete.py
    # event-grid-off and auto-approve-off appear only when required: tests/fleet/test_events_policy.py
    assert seen | {"stale-unknown", "unreadable", "event-grid-off", "auto-approve-off"} == set(FINDINGS)


def test_without_timeout_any_enabled_timeout_complies(arm: ArmServers, conn: Connection) -> None:
    sets = _by_name(audit(BOTH, connection=conn))
    assert sets["web-5m"].compliant and sets["web-5m"].findings == []
    assert not sets["web-stale"].compliant  # stale instances still count


def test_json_record_fields(arm: ArmServers) -> None:
    result = run("fleet", "audit", "--subscription", PROD, "--timeout", "10", "-o", "json")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert {r["name"] for r in records} == {"web-compliant", "web-disabled", "web-5m", "web-stale"}
    stale = next(r for r in records if r["name"] == "web-stale")
    for key in ("id", "subscription_id", "resource_group", "name", "enabled", "not_before_timeout",
                "orchestration_mode", "upgrade_mode", "instances", "stale_instances", "findings", "compliant"):
        assert key in stale
    assert stale["not_before_timeout"] == "PT10M" and stale["stale_instances"] == 2 and stale["instances"] == 6
    disabled = next(r for r in records if r["name"] == "web-disabled")
    assert disabled["not_before_timeout"] is None and disabled["enabled"] is False


def test_csv_and_table(arm: ArmServers) -> None:
    result = run("fleet", "audit", "--subscription", "Contoso Production", "-o", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 4 and rows[0]["subscription_name"] == "Contoso Production"
    table = run("fleet", "audit", "--subscription", "Contoso Production", "--timeout", "10")
    assert "web-stale" in table.stdout and "stale-model:" in table.stdout


def test_detailed_exitcode(arm: ArmServers) -> None:
    assert run("fleet", "audit", "--subscription", PROD, "--detailed-exitcode", "--timeout", "10").exit_code == 2
    only_ok = run("fleet", "audit", "--subscription", PROD, "--name", "web-compl*", "--detailed-exitcode")
    assert only_ok.exit_code == 0, only_ok.output
    bad = run("fleet", "audit", "--tag", "novalue", "--detailed-exitcode")
    assert bad.exit_code == 1  # 2 would read as "non-compliant"
    for option_error in (["--timeout", "99"], ["--concurrency", "x"]):  # refused while click parses
        refused = run("fleet", "audit", *option_error, "--detailed-exitcode")
        assert refused.exit_code == 1, (option_error, refused.output)


def test_bad_input_is_one_line_exit_2(arm: ArmServers) -> None:
    for args in (["--tag", "novalue"], ["--timeout", "20"], ["--subscription", "No Such Subscription"],
                 ["--name", "web/*"], ["-g", "bad/rg"]):
        result = run("fleet", "audit", *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_selectors(arm: ArmServers, conn: Connection) -> None:
    report = audit(Scope.build(tags=["env=prod"], resource_groups=["RG-WEB"], name="web-[ds]*"), connection=conn)
    assert sorted(r.name for r in report.scale_sets) == ["web-disabled", "web-stale"]
    assert report.scale_sets[0].resource_group == "rg-web"  # ARM's casing, from the id


def test_default_scope_is_every_visible_subscription(arm: ArmServers, conn: Connection, state: ArmState) -> None:
    report = audit(connection=conn)
    assert len(report.scale_sets) == len(state.scale_sets())
    assert report.calls["subscription_lists"] == 1
    assert arm.arm_server.log.count("GET", "/subscriptions") >= 1


def test_management_group_scope(arm: ArmServers, conn: Connection) -> None:
    report = audit(Scope.build(management_groups=["contoso"]), connection=conn)
    assert {r.subscription_id for r in report.scale_sets} == {PROD, STAGING}



def test_management_group_audit_and_rollout_plan_name_the_subscriptions(arm: ArmServers) -> None:
    """The table shows subscription names, not ids, also when a management group picked them; the
    rollout plan's lines name the subscription (the same rg/name recurs across subscriptions)."""
    table = run("fleet", "audit", "--management-group", "contoso")
    assert table.exit_code == 0, table.output
    assert "Contoso Production" in table.stdout and PROD not in table.stdout
    plan = run("fleet", "rollout", "--management-group", "contoso", "--timeout", "10", "--dry-run")
    assert plan.exit_code == 0, plan.output
    lines = [line for line in plan.stdout.splitlines() if line.startswith("  ")]
    assert lines and all("(Contoso " in line for line in lines), lines


def test_paging_and_call_count(arm: ArmServers, conn: Connection, state: ArmState) -> None:
    state.rg_page_size = 3
    report = audit(connection=conn)
    total = len(state.scale_sets())
    assert len(report.scale_sets) == total == len({r.id for r in report.scale_sets})
    # the sets' pages, then the stale-instance summary's (one row per Uniform set with instances)
    summarised = sum(1 for ss in state.scale_sets() if ss.orchestration == "Uniform" and ss.instances)
    pages = math.ceil(total / 3) + math.ceil(summarised / 3)
    assert report.calls["graph_pages"] == pages
    graph_posts = arm.arm_server.log.count("POST", "/providers/Microsoft.ResourceGraph/resources")
    assert graph_posts == pages
    enabled_uniform = [r for r in report.scale_sets if r.enabled and r.uniform]
    assert enabled_uniform and all(r.stale_instances is not None for r in enabled_uniform)
    assert report.calls["instance_lists"] == 0  # paid per page, not per set
    # nothing else: no per-set GET or list, no per-subscription crawl
    others = [r for r in arm.arm_server.log.all() if "virtualMachineScaleSets" in r.path]
    assert others == []


def test_at_most_1000_subscriptions_per_query(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    many = [f"00000000-0000-0000-0009-{i:012d}" for i in range(1500)] + [PROD]
    for sub in many:  # visible to the credential (a named subscription it cannot see fails the audit)
        state.add_subscription(sub)
    report = audit(Scope.build(subscriptions=many), connection=conn)
    assert {r.subscription_id for r in report.scale_sets} == {PROD}
    bodies = [json.loads(r.body) for r in arm.arm_server.log.find("POST", "ResourceGraph")]
    # the sets' query, then the stale-instance summary: each in chunks of at most 1,000 subscriptions
    assert [len(b["subscriptions"]) for b in bodies] == [1000, 501, 1000, 501]


def test_library_refuses_bad_input_before_any_request(arm: ArmServers, conn: Connection) -> None:
    with pytest.raises(UsageError):
        audit(BOTH, timeout="PT20M", connection=conn)
    with pytest.raises(UsageError):
        Scope.build(tags=["=x"])
    assert arm.arm_server.log.all() == []


def test_audit_retries_read_throttling(arm: ArmServers) -> None:
    """A per-subscription read quota: the audit's instance lists get 429s, wait them out on the
    injected clock and finish with the same answer."""
    from vmss_terminate.clock import ManualClock

    clock = ManualClock()
    state = ArmState(clock=clock)
    state.load_seed({"generate": {"scaleSets": 12, "subscriptions": 2, "capacity": 2, "special": False},
                     "quotas": {"reads": {"bucket": 2, "refillPerSecond": 1}},
                     "resourceGraphComputeResources": False})  # stale counts from the instance lists
    arm.reset(state)
    report = audit(Scope.build(subscriptions=sorted({s.subscription for s in state.scale_sets()})), timeout=10,
                   connection=Connection(arm_endpoint=arm.arm_url), clock=clock, concurrency=4)
    throttled = [r for r in arm.arm_server.log.all() if r.status == 429]
    assert throttled
    assert all(r.stale_instances is not None for r in report.scale_sets if r.enabled)
    assert len(report.scale_sets) == 12
