"""Bad input is one line, exit 2, and nothing is sent: not to ARM, not even to the token endpoint."""

from __future__ import annotations

import json

import pytest

from vmss_terminate.control import body
from vmss_terminate.control.connection import CLOUDS, check_compute_api_version, resolve_endpoint
from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.errors import InvalidValue, UsageError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, requests_seen, run


@pytest.fixture
def web(arm: ArmServers, state: ArmState) -> ArmServers:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    return arm


def _refused(result, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0]


@pytest.mark.parametrize("timeout", ["20m", "4", "PT16M", "PT4M59S", "PT10M30S", "ten", "-5", "0"])
@pytest.mark.parametrize("command", ["enable", "retime", "plan"])
def test_bad_timeout_is_exit_2_before_any_request(web: ArmServers, command: str, timeout: str) -> None:
    result = run(command, "-g", RG, "-n", "web", "--timeout", timeout)
    _refused(result, "timeout")
    assert requests_seen(web) == 0


@pytest.mark.parametrize("timeout", ["PT10M", "PT600S", "PT0H10M", "10", "10m"])
def test_timeout_spellings_all_become_pt10m(web: ArmServers, timeout: str) -> None:
    result = run("enable", "-g", RG, "-n", "web", "--timeout", timeout, "--dry-run", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"]["patch_body"] == body.patch_bytes(True, 10).decode()


@pytest.mark.parametrize("version", ["2018-10-01", "2017-12-01", "2019-02-28"])
def test_old_api_version_refused_quoting_azure(web: ArmServers, version: str) -> None:
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--api-version", version)
    _refused(result, "Could not find member 'scheduledEventsProfile' on object of type 'VirtualMachineProfile'")
    assert requests_seen(web) == 0


def test_malformed_api_version_refused(web: ArmServers) -> None:
    _refused(run("status", "-g", RG, "-n", "web", "--api-version", "latest"), "api-version")
    assert requests_seen(web) == 0


def test_http_endpoint_off_loopback_refused(web: ArmServers) -> None:
    for endpoint in ("http://management.example.com", "http://10.0.0.5:8080", "ftp://127.0.0.1"):
        result = run("status", "-g", RG, "-n", "web", "--arm-endpoint", endpoint)
        _refused(result, "--arm-endpoint")
    assert requests_seen(web) == 0


def test_missing_subscription_is_usage_error(web: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID")
    _refused(run("enable", "-g", RG, "-n", "web", "--timeout", "10m"), "AZURE_SUBSCRIPTION_ID")
    assert requests_seen(web) == 0


def test_bad_batch_size_refused(web: ArmServers) -> None:
    for size in ("0", "0%", "150%", "many", "-1"):
        _refused(run("upgrade", "-g", RG, "-n", "web", "--batch-size", size), "batch-size")
    assert requests_seen(web) == 0


def test_subscription_option_beats_env(web: ArmServers) -> None:
    result = run("status", "-g", RG, "-n", "web", "--subscription", "11111111-0000-0000-0000-000000000000")
    assert result.exit_code == 1 and "SubscriptionNotFound" in result.stderr


# --- pure helpers -----------------------------------------------------------------------------


def test_clouds_set_endpoint_and_scope() -> None:
    assert resolve_endpoint(None, "AzureCloud") == ("https://management.azure.com",
                                                    "https://management.azure.com/.default")
    assert resolve_endpoint(None, "AzureChinaCloud") == ("https://management.chinacloudapi.cn",
                                                         "https://management.chinacloudapi.cn/.default")
    assert resolve_endpoint(None, "AzureUSGovernment") == ("https://management.usgovcloudapi.net",
                                                           "https://management.usgovcloudapi.net/.default")
    assert set(CLOUDS) == {"AzureCloud", "AzureChinaCloud", "AzureUSGovernment"}


def test_custom_endpoint_keeps_cloud_scope_unless_overridden() -> None:
    assert resolve_endpoint("https://arm.contoso.test/", "AzureUSGovernment") == (
        "https://arm.contoso.test", "https://management.usgovcloudapi.net/.default")
    assert resolve_endpoint("https://arm.contoso.test", None, "api://custom/.default")[1] == "api://custom/.default"
    for loopback in ("http://127.0.0.1:8080", "http://127.3.2.1", "http://localhost:1", "http://[::1]:9"):
        assert resolve_endpoint(loopback, None)[0] == loopback
    with pytest.raises(UsageError):
        resolve_endpoint("http://arm.contoso.test", None)
    with pytest.raises(UsageError):
        resolve_endpoint(None, "Mars")


def test_api_version_check() -> None:
    assert check_compute_api_version(None) is None
    assert check_compute_api_version("2019-03-01") == "2019-03-01"
    assert check_compute_api_version("2024-11-01-preview") == "2024-11-01-preview"
    with pytest.raises(UsageError):
        check_compute_api_version("2019-01-01")


def test_batch_size_arithmetic() -> None:
    assert BatchSize.parse("20%").for_total(1000) == 200
    assert BatchSize.parse("20%").for_total(3) == 1  # never below one
    assert BatchSize.parse("7").for_total(3) == 7
    assert BatchSize.parse("100%").for_total(9) == 9
    for loose in (" 100 % ", "１０", "10\n", "9" * 5000):  # strict ASCII digits, bounded (issue 20)
        with pytest.raises(InvalidValue):
            BatchSize.parse(loose)
