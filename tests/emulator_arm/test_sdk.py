"""The real azure-mgmt-compute SDK and DefaultAzureCredential, unchanged, against the emulator.

How the SDK must be configured (also in vmss_terminate_sim/emulator/arm.py's docstring): the token
endpoint env (IDENTITY_ENDPOINT/IDENTITY_HEADER), base_url=<emulator>, polling_interval=0, and a
per-call policy that lets bearer tokens go over http to loopback only (the product's own,
`control.pipeline.allow_loopback_http_policy`, built on `vmss_terminate.net.is_loopback_http`).
"""

from __future__ import annotations

from typing import Iterator

import pytest

from vmss_terminate.control.pipeline import allow_loopback_http_policy
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import SUB

pytest.importorskip("azure.mgmt.compute")


@pytest.fixture
def client(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from azure.identity import DefaultAzureCredential
    from azure.mgmt.compute import ComputeManagementClient

    for name, value in arm.env.items():
        monkeypatch.setenv(name, value)
    credential = DefaultAzureCredential(exclude_cli_credential=True, exclude_powershell_credential=True,
                                        exclude_developer_cli_credential=True,
                                        exclude_visual_studio_code_credential=True)
    with ComputeManagementClient(credential, SUB, base_url=arm.arm_url, polling_interval=0,
                                 per_call_policies=[allow_loopback_http_policy()]) as client:
        yield client


def test_default_credential_gets_a_token_from_the_endpoint(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.identity import DefaultAzureCredential

    for name, value in arm.env.items():
        monkeypatch.setenv(name, value)
    token = DefaultAzureCredential().get_token("https://management.azure.com/.default")
    assert arm.tokens.check(token.token) is None
    assert arm.token_server.log.count("GET", "/msi/token") == 1


def test_sdk_get_patch_list_upgrade(client, arm: ArmServers, state: ArmState) -> None:  # type: ignore[no-untyped-def]
    vmss = client.virtual_machine_scale_sets.get("rg", "MyVmss")
    assert vmss.name == "myvmss"
    assert vmss.virtual_machine_profile.scheduled_events_profile is None

    body = {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}}}}
    updated = client.virtual_machine_scale_sets.begin_update("rg", "myvmss", body, api_version="2019-03-01").result()
    tnp = updated.virtual_machine_profile.scheduled_events_profile.terminate_notification_profile
    assert (tnp.enable, tnp.not_before_timeout, updated.provisioning_state) == (True, "PT10M", "Succeeded")
    assert arm.arm_server.log.count("PATCH") == 1
    assert any("api-version=2019-03-01" in r.path or r.query.get("api-version") == ["2019-03-01"]
               for r in arm.arm_server.log.find("PATCH"))

    vms = list(client.virtual_machine_scale_set_vms.list("rg", "myvmss"))
    assert [vm.instance_id for vm in vms] == ["0", "1", "2", "3"]
    assert not any(vm.latest_model_applied for vm in vms)

    client.virtual_machine_scale_sets.begin_update_instances("rg", "myvmss", {"instanceIds": ["0", "1"]}).result()
    latest = {vm.instance_id: vm.latest_model_applied for vm in client.virtual_machine_scale_set_vms.list("rg", "myvmss")}
    assert latest == {"0": True, "1": True, "2": False, "3": False}
    ss = state.scale_set(SUB, "rg", "myvmss")
    assert ss is not None and ss.instances["0"].applied_profile == body["properties"]["virtualMachineProfile"][
        "scheduledEventsProfile"]


def test_sdk_follows_next_link(client, state: ArmState) -> None:  # type: ignore[no-untyped-def]
    state.add_scale_set(SUB, "rg", "big", capacity=25)
    state.page_size = 10
    assert len(list(client.virtual_machine_scale_set_vms.list("rg", "big"))) == 25


def test_sdk_sees_failed_lro(client, state: ArmState) -> None:  # type: ignore[no-untyped-def]
    from azure.core.exceptions import HttpResponseError

    ss = state.scale_set(SUB, "rg", "myvmss")
    state.apply_model(ss, dict(ss.vm_profile, scheduledEventsProfile={}))  # instances now stale
    state.fail_next_lro("InternalExecutionError", "boom")
    with pytest.raises(HttpResponseError, match="boom"):
        client.virtual_machine_scale_sets.begin_update_instances("rg", "myvmss", {"instanceIds": ["0"]}).result()
    assert not ss.instances["0"].latest_model_applied


def test_sdk_retries_a_throttled_call(client, arm: ArmServers) -> None:  # type: ignore[no-untyped-def]
    arm.arm_server.faults.add(status=429, headers={"Retry-After": "0"}, method="GET", times=1)
    assert client.virtual_machine_scale_sets.get("rg", "myvmss").sku.capacity == 4
    assert arm.arm_server.log.count("GET", "/virtualMachineScaleSets/myvmss") == 2


def test_sdk_over_https_with_a_local_ca(state: ArmState, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    trustme = pytest.importorskip("trustme")
    from azure.identity import DefaultAzureCredential
    from azure.mgmt.compute import ComputeManagementClient

    from vmss_terminate_sim.emulator.arm.app import start_arm

    ca = trustme.CA()
    server_context = __import__("ssl").create_default_context(__import__("ssl").Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    with start_arm(state, ssl_context=server_context) as servers:
        assert servers.arm_url.startswith("https://127.0.0.1:")
        for name, value in servers.env.items():
            monkeypatch.setenv(name, value)
        with ComputeManagementClient(DefaultAzureCredential(), SUB, base_url=servers.arm_url,
                                     polling_interval=0, connection_verify=str(ca_path)) as client:
            assert client.virtual_machine_scale_sets.get("rg", "myvmss").name == "myvmss"
