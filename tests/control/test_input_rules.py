"""Input the control plane checks before any request (names, subscriptions, durations), and the
library reading the same environment as the CLI and speaking its caller's language."""

from __future__ import annotations

import json

import pytest

from vmss_terminate.control import Connection, enable, status
from vmss_terminate.errors import AzureError, InvalidValue, UsageError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, requests_seen, run

OTHER = "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("args, message", [
    (["-g", "", "-n", "x"], "invalid --resource-group '': a resource group name cannot be empty"),
    (["-g", "rg.", "-n", "x"], "invalid --resource-group 'rg.'"),
    (["-g", "a/b", "-n", "x"], "invalid --resource-group 'a/b'"),
    (["-g", "r" * 91, "-n", "x"], "invalid --resource-group"),
    (["-g", "rg", "-n", ""], "invalid --name '': a scale set name cannot be empty"),
    (["-g", "rg", "-n", "web vmss"], "invalid --name 'web vmss'"),
    (["-g", "rg", "-n", "-web"], "invalid --name '-web'"),
    (["-g", "rg", "-n", "web."], "invalid --name 'web.'"),
    (["-g", "rg", "-n", "w" * 65], "invalid --name"),
])
def test_names_azure_cannot_accept_are_refused_before_any_request(arm: ArmServers, args: list, message: str) -> None:
    result = run("status", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert requests_seen(arm) == 0


def test_valid_unusual_names_pass_the_name_rules(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, "rg_prod-1.x", "Web_vmss.2-a", capacity=1)
    result = run("status", "-g", "rg_prod-1.x", "-n", "Web_vmss.2-a")
    assert result.exit_code == 0, result.output


def test_library_refuses_bad_names_in_its_own_words(conn: Connection) -> None:
    with pytest.raises(InvalidValue, match=r"^invalid resource_group '': "):
        status("", "web", connection=conn)
    with pytest.raises(InvalidValue, match=r"^invalid name 'a/b': "):
        status(RG, "a/b", connection=conn)


def test_subscription_display_name_is_resolved_through_get_subscriptions(arm: ArmServers, state: ArmState) -> None:
    state.add_subscription(SUB, "Production")
    state.add_subscription(OTHER, "Staging")
    state.add_scale_set(SUB, RG, "web", capacity=1)
    result = run("status", "-g", RG, "-n", "web", "--subscription", "production", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["subscription_id"] == SUB
    assert arm.arm_server.log.count("GET", "/subscriptions") >= 2  # the list, then the scale set under the id


def test_unknown_subscription_name_lists_what_is_visible(arm: ArmServers, state: ArmState) -> None:
    state.add_subscription(SUB, "Production")
    result = run("status", "-g", RG, "-n", "web", "--subscription", "Prod")
    assert result.exit_code == 2  # bad input, as in fleet (tests/control/test_subscription_names.py)
    assert "no subscription named 'Prod' is visible to this credential (visible: Production" in result.stderr


def test_ambiguous_subscription_name_asks_for_the_id(arm: ArmServers, state: ArmState) -> None:
    state.add_subscription(SUB, "Shared")
    state.add_subscription(OTHER, "shared")
    result = run("status", "-g", RG, "-n", "web", "--subscription", "Shared")
    assert result.exit_code == 2 and "2 subscriptions have this name" in result.stderr and OTHER in result.stderr


@pytest.mark.parametrize("value", ["0000-1111-2222-3333-4444-5555-6666-7777", "a/b", "x" * 65, "bad?name"])
def test_malformed_subscription_is_refused_before_any_request(arm: ArmServers, value: str) -> None:
    result = run("status", "-g", RG, "-n", "web", "--subscription", value)
    assert result.exit_code == 2 and "invalid --subscription" in result.stderr, result.output
    assert requests_seen(arm) == 0


def test_library_reads_the_environment_the_cli_documents(arm: ArmServers, state: ArmState) -> None:
    """The `arm` fixture sets AZURE_SUBSCRIPTION_ID and VMSS_TERMINATE_ARM_ENDPOINT: Connection() with
    no arguments must use them (it used to go to management.azure.com and ask for --subscription)."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    result = status(RG, "web", connection=Connection())
    assert result.subscription_id == SUB and result.instances is not None and len(result.instances) == 2
    assert arm.arm_server.log.count("GET", f"/subscriptions/{SUB}/") >= 1


def test_library_errors_name_python_parameters_not_cli_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    with pytest.raises(UsageError) as caught:
        status(RG, "web", connection=Connection(arm_endpoint="http://127.0.0.1:9"))
    assert "Connection(subscription_id=...)" in str(caught.value) and "--" not in str(caught.value)
    with pytest.raises(InvalidValue, match=r"^invalid batch_size '-1'"):
        from vmss_terminate.control import BatchSize
        BatchSize.parse("-1")
    with pytest.raises(InvalidValue, match=r"^invalid timeout 'PT20M'"):
        enable(RG, "web", "PT20M", connection=Connection(subscription_id=SUB, arm_endpoint="http://127.0.0.1:9"))
    with pytest.raises(UsageError) as no_timeout:
        enable(RG, "web", None, connection=Connection(subscription_id=SUB))  # type: ignore[arg-type]
    assert "--" not in str(no_timeout.value) and "--timeout" in str(no_timeout.value.cli_message)
    from vmss_terminate_sim.sandbox import SandboxConfig
    with pytest.raises(InvalidValue, match=r"^invalid instances 0: "):
        SandboxConfig(instances=0).validated()


def test_arm_answer_that_is_not_an_object_is_one_line_exit_1(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    for body in (b'"a string"', b"[1, 2]", b"42", b""):
        arm.arm_server.faults.add(status=200, body=body, method="GET", path_contains="/virtualMachineScaleSets/web",
                                  headers={"Content-Type": "application/json"})
        result = run("status", "-g", RG, "-n", "web")
        assert result.exit_code == 1, (body, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: reading scale set rg/web: "), (body, lines)
        assert "Traceback" not in result.output
        arm.arm_server.faults.clear()


def test_missing_ca_bundle_is_one_line_exit_1(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/ca.pem")
    result = run("status", "-g", RG, "-n", "web", "--arm-endpoint", "https://127.0.0.1:9")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "CA certificate bundle" in lines[0] and "Traceback" not in result.output


def test_library_connection_errors_are_azure_errors(conn: Connection) -> None:
    with pytest.raises(AzureError):
        status(RG, "nope", connection=conn)
