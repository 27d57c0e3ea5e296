"""Azure failures: clear one-line messages, exit 1, and never a half-done change left unreported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List, Tuple

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.control import Connection, UpgradeIncomplete, UpgradeOptions, enable, status, upgrade
from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.errors import AzureError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run, writes


def _one_error_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_unknown_scale_set(arm: ArmServers, state: ArmState) -> None:
    state.add_resource_group(SUB, RG)
    line = _one_error_line(run("status", "-g", RG, "-n", "ghost"))
    assert "scale set rg/ghost not found" in line and "ResourceNotFound" in line


def test_429_once_then_success(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(status=429, method="PATCH", headers={"Retry-After": "0"},
                              body=b'{"error": {"code": "TooManyRequests", "message": "slow down"}}')
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m")
    assert result.exit_code == 0, result.output
    patches = arm.arm_server.log.find("PATCH")
    assert [p.status for p in patches] == [429, 200]
    assert patches[0].body == patches[1].body  # the raw body stream is rewound for the retry


def test_lro_failed_is_exit_1_with_arm_message(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    state.fail_next_lro(code="InternalExecutionError", message="The update blew up.", kind="update")
    line = _one_error_line(run("enable", "-g", RG, "-n", "web", "--timeout", "10m"))
    assert "InternalExecutionError: The update blew up. (long-running operation Failed)" in line
    assert arm.arm_server.log.count("POST") == 0  # no upgrade after a failed PATCH


def test_arm_400_is_one_line_with_code(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(status=400, method="PATCH", body=json.dumps(
        {"error": {"code": "OperationNotAllowed", "message": "Spot VMs cannot\nuse terminate notifications."}}
    ).encode())
    line = _one_error_line(run("enable", "-g", RG, "-n", "web", "--timeout", "10m"))
    assert "OperationNotAllowed: Spot VMs cannot use terminate notifications. (HTTP 400)" in line


def test_500_with_short_retries_fails_fast(arm: ArmServers, state: ArmState) -> None:
    """retry_total / retry_backoff_factor reach the SDK's RetryPolicy (no 10 x backoff wait)."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(status=500, method="GET", times=10,
                              body=b'{"error": {"code": "InternalServerError", "message": "oops"}}')
    conn = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, retry_total=1, retry_backoff_factor=0.0)
    with pytest.raises(AzureError, match="InternalServerError: oops"):
        status(RG, "web", connection=conn)
    assert arm.arm_server.log.count("GET", "/virtualMachineScaleSets/web") == 2  # first try + 1 retry


def test_upgrade_failure_in_batch_2_reports_and_rerun_finishes_the_rest(arm: ArmServers, state: ArmState) -> None:
    ss = state.add_scale_set(SUB, RG, "web", capacity=10)
    state.fail_manualupgrade(nth=2, code="VMAgentNotReady", message="instance 4 agent not ready")
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--batch-size", "3")
    line = _one_error_line(result)
    assert "profile changed; upgrade incomplete: 3 done, 7 remaining" in line
    assert f"re-run `vmss-terminate upgrade -g rg -n web --subscription {SUB} --arm-endpoint " in line
    assert "VMAgentNotReady" in line
    assert "upgraded 3 instance(s) in 1 batch(es); 7 remaining" in result.stdout  # the report is printed
    stale = sorted(i.instance_id for i in ss.instances.values() if not i.latest_model_applied)
    assert len(stale) == 7

    arm.arm_server.log.clear()
    rerun = run("upgrade", "-g", RG, "-n", "web", "--batch-size", "3", "-o", "json")
    assert rerun.exit_code == 0, rerun.output
    sent: List[str] = []
    for post in arm.arm_server.log.find("POST", "/manualupgrade"):
        sent.extend(json.loads(post.body)["instanceIds"])
    assert sorted(sent) == stale  # only what was left, each once
    assert arm.arm_server.log.count("PATCH") == 0
    assert all(i.latest_model_applied for i in ss.instances.values())


def test_upgrade_failure_json_error_object_carries_the_report(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=4, stale_instances=4)
    state.fail_manualupgrade(nth=1)
    result = run("upgrade", "-g", RG, "-n", "web", "--batch-size", "2", "-o", "json")
    assert result.exit_code == 1 and result.stdout == ""  # stdout holds results only
    line, obj = result.stderr.strip().splitlines()
    assert line.startswith("error: upgrade incomplete: 0 done, 4 remaining")
    error = json.loads(obj)["error"]
    assert error["type"] == "azure" and error["exit_code"] == 1
    assert error["message"].startswith("upgrade incomplete: 0 done, 4 remaining")
    assert error["upgrade"]["upgraded"] == [] and len(error["upgrade"]["remaining"]) == 4


def test_library_progress_and_partial_result(conn: Connection, arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=6)
    state.fail_manualupgrade(nth=3)
    seen: List[Tuple[int, int]] = []
    with pytest.raises(UpgradeIncomplete) as caught:
        enable(RG, "web", "PT10M", connection=conn, options=UpgradeOptions(batch_size=BatchSize(2, False)),
               progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 6), (2, 6), (4, 6)]
    assert caught.value.result.batches_done == 2 and len(caught.value.result.remaining) == 2
    done = upgrade(RG, "web", connection=conn, options=UpgradeOptions(batch_size=BatchSize(2, False)))
    assert done.complete and len(done.upgraded) == 2


def test_no_credential_says_what_to_configure(arm: ArmServers, state: ArmState,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    monkeypatch.setenv("IDENTITY_HEADER", "wrong-secret")  # the token endpoint refuses us
    line = _one_error_line(run("status", "-g", RG, "-n", "web"))
    assert "az login" in line and "AZURE_CLIENT_ID" in line and "managed identity" in line
    assert "wrong-secret" not in line
    assert arm.arm_server.log.count() == 0


def test_arm_rejecting_the_token_audience_is_reported(arm: ArmServers, state: ArmState) -> None:
    """--cloud sets the token scope even with a custom endpoint: a China-cloud token is refused here."""
    state.add_scale_set(SUB, RG, "web", capacity=1)
    line = _one_error_line(run("status", "-g", RG, "-n", "web", "--cloud", "AzureChinaCloud"))
    assert "InvalidAuthenticationTokenAudience" in line and "another audience (check --cloud" in line
    assert "az login" not in line  # a token was issued: logging in again is not the fix
    resources = [r.query.get("resource", [""])[0] for r in arm.token_server.log.all()]
    assert resources == ["https://management.chinacloudapi.cn"]
    issued = list(arm.tokens.recently_issued)  # the secret must never be printed
    assert issued and all(t not in line for t in issued)


def test_automatic_wait_polls_until_current(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    state = ArmState(clock=clock)
    arm.reset(state)
    state.add_scale_set(SUB, RG, "auto", capacity=3, upgrade_policy="Automatic", automatic_delay=60)
    conn = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url)
    result = enable(RG, "auto", 10, connection=conn, clock=clock,
                    options=UpgradeOptions(wait=True, wait_timeout=300, poll_interval=20))
    assert result.upgrade is not None and result.upgrade.complete and result.upgrade.waited
    assert result.upgrade.remaining == []
    assert arm.arm_server.log.count("POST") == 0
    assert 3 <= arm.arm_server.log.count("GET", "/virtualMachines") <= 6  # bounded polling

    state.add_scale_set(SUB, RG, "slow", capacity=2, upgrade_policy="Rolling", rolling_delay=10_000)
    with pytest.raises(UpgradeIncomplete, match="profile changed; upgrade incomplete: 0 done, 2 remaining"):
        enable(RG, "slow", 10, connection=conn, clock=clock,
               options=UpgradeOptions(wait=True, wait_timeout=100, poll_interval=30))
    assert writes(arm).count(f"PATCH /subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/"
                             f"virtualMachineScaleSets/slow") == 1


def test_403_says_which_permission_is_missing(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    arm.arm_server.faults.add(status=403, method="PATCH", body=json.dumps({"error": {
        "code": "AuthorizationFailed", "message": "The client 'x' does not have authorization to perform action."
    }}).encode())
    line = _one_error_line(run("enable", "-g", RG, "-n", "web", "--timeout", "10m"))
    assert "AuthorizationFailed" in line and "(HTTP 403)" in line and "Virtual Machine Contributor" in line


@pytest.mark.parametrize("rg, sub, expected, code", [
    ("nowhere", SUB, f"resource group nowhere not found in subscription {SUB}", "ResourceGroupNotFound"),
    (RG, "11111111-2222-3333-4444-555555555555",
     "subscription 11111111-2222-3333-4444-555555555555 not found", "SubscriptionNotFound"),
])
def test_missing_resource_group_or_subscription_is_named(arm: ArmServers, state: ArmState, rg: str, sub: str,
                                                         expected: str, code: str) -> None:
    """A 404 names the level that is missing, not a scale set that may well exist."""
    state.add_scale_set(SUB, RG, "web", capacity=1)
    line = _one_error_line(run("status", "-g", rg, "-n", "web", "--subscription", sub))
    assert expected in line and code in line
    assert "scale set" not in line.split(": ", 2)[-1].split("(")[0]


def test_wait_timeout_report_does_not_suggest_wait_again(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "roll", capacity=2, upgrade_policy="Rolling", rolling_delay=10_000)
    state.lro_polls = 0  # --wait-timeout bounds the PATCH's operation too: it ends on the one look a 0 s wait has
    result = run("enable", "-g", RG, "-n", "roll", "--timeout", "10m", "--wait", "--wait-timeout", "0",
                 "--poll-interval", "0.01")
    line = _one_error_line(result)
    assert "profile changed; upgrade incomplete: 0 done, 2 remaining" in line
    assert "2 of 2 instances still not on the latest model after 0s" in result.stdout
    assert "use --wait" not in result.stdout


def test_auth_failure_in_a_real_process_prints_one_line(arm: ArmServers, state: ArmState,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Without logging configured, azure-identity's multi-line WARNING (the whole credential chain)
    would reach stderr through Python's last-resort handler; only our one line may."""
    state.add_scale_set(SUB, RG, "web", capacity=1)
    monkeypatch.setenv("IDENTITY_HEADER", "wrong-secret")
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    proc = subprocess.run([sys.executable, "-m", "vmss_terminate", "status", "-g", RG, "-n", "web"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "az login" in lines[0] and "wrong-secret" not in proc.stderr
    assert arm.arm_server.log.count() == 0


def test_flexible_vm_list_server_error_is_a_failure_not_unavailable(conn: Connection, arm: ArmServers,
                                                                     state: ArmState) -> None:
    """Only a refusal (409 OperationNotAllowed) means "not available"; a 500 must not be reported
    as missing information."""
    state.add_scale_set(SUB, RG, "flex", orchestration="Flexible", capacity=2)
    arm.arm_server.faults.add(status=500, method="GET", path_contains="/virtualMachineScaleSets/flex/virtualMachines",
                              times=5, body=b'{"error": {"code": "InternalServerError", "message": "oops"}}')
    with pytest.raises(AzureError, match="InternalServerError: oops"):
        status(RG, "flex", connection=conn)
