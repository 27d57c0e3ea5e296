"""A Resource Graph answer with resultTruncated "true" and no $skipToken is an incomplete estate:
the audit fails (exit 1, one clear line) instead of silently reporting part of it."""

from __future__ import annotations

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import PROD, run


def test_truncated_resource_graph_result_fails_the_audit(arm: ArmServers, state: ArmState) -> None:
    state.rg_page_size = 2
    state.rg_truncated = True
    result = run("fleet", "audit", "--subscription", PROD, "-o", "json")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "truncated the result (2 of " in result.stderr and "refusing an incomplete audit" in result.stderr
    rollout = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10")
    assert rollout.exit_code == 1 and "truncated" in rollout.stderr


def test_a_result_within_one_page_is_not_truncated(arm: ArmServers, state: ArmState) -> None:
    state.rg_truncated = True  # 1,000 rows per page: the whole estate fits
    assert run("fleet", "audit", "--subscription", PROD).exit_code == 0
