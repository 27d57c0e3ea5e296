"""Unknown must never read as compliant: a scale set whose stale-instance count is unknown
(Flexible orchestration, or an instance list that could not be read) is finding `stale-unknown`,
not compliant, exit 2 under --detailed-exitcode, and `rollout` upgrades every member of it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from vmss_terminate import control
from vmss_terminate.control import Connection
from vmss_terminate.fleet import Scope, audit
from vmss_terminate.fleet.rollout import rollout
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import ROOT, arm_writes, run

SUB = "00000000-0000-0000-0000-000000000000"
FLEX = Scope.build(subscriptions=[SUB], name="flexvmss")


@pytest.fixture
def state() -> ArmState:
    state = ArmState()
    state.load_seed(ROOT / "examples" / "seed.json")
    return state


def _enable(conn: Connection, name: str = "flexvmss") -> None:
    control.enable("rg", name, 10, connection=replace(conn, subscription_id=SUB))


def test_flexible_set_with_unknown_stale_count_is_not_compliant(arm: ArmServers, conn: Connection) -> None:
    _enable(conn)
    result = run("fleet", "audit", "--name", "flexvmss", "-o", "json", "--timeout", "10", "--detailed-exitcode")
    assert result.exit_code == 2, result.output
    (record,) = json.loads(result.stdout)
    assert record["stale_instances"] is None
    assert record["findings"] == ["stale-unknown"] and record["compliant"] is False


def test_unreadable_instance_list_is_stale_unknown_not_compliant(arm: ArmServers, conn: Connection) -> None:
    arm.state.rg_compute_resources = False  # stale counts from the instance list (Resource Graph has no summary)
    _enable(conn, "myvmss")
    arm.arm_server.faults.add(status=404, method="GET", path_contains="/virtualMachineScaleSets/myvmss/virtualMachines",
                              times=5)
    (record,) = audit(Scope.build(subscriptions=[SUB], name="myvmss"), timeout=10, connection=conn).scale_sets
    assert record.stale_instances is None and record.findings == ["stale-unknown"] and not record.compliant


def test_rollout_upgrades_every_member_of_a_stale_unknown_set_once(arm: ArmServers, conn: Connection,
                                                                  tmp_path: Path) -> None:
    _enable(conn)
    before = len(arm_writes(arm))
    journal = tmp_path / "journal.jsonl"
    result = rollout(FLEX, timeout=10, connection=conn, batch_size="10", journal=journal)
    (planned,) = result.plan.sets
    assert planned.action == "upgrade" and planned.instances == 3
    assert result.ok and [o.status for o in result.outcomes] == ["changed"]
    assert result.outcomes[0].upgraded == 3 and "re-audit still shows stale-unknown" in (result.outcomes[0].note or "")
    upgrades = [w for w in arm_writes(arm)[before:] if w.endswith("/manualupgrade")]
    assert len(upgrades) == 1
    # the re-run with the same journal reports it done instead of upgrading again (no endless loop)
    again = rollout(FLEX, timeout=10, connection=conn, journal=journal)
    assert again.ok and [o.status for o in again.outcomes] == ["compliant"]
    assert again.outcomes[0].note and len(arm_writes(arm)) == before + 1


def test_rollout_plan_names_the_wanted_timeout(arm: ArmServers) -> None:
    result = run("fleet", "rollout", "--subscription", SUB, "--timeout", "10", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "enable off -> PT10M" in result.stdout and "-> wanted" not in result.stdout
    assert "upgrade  rg/flexvmss" not in result.stdout  # disabled: enable, upgrading every member
