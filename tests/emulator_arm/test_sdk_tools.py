"""What an SDK-based configuration tool sends (issue 18): it takes the token scope from the cloud
metadata, reads the resource group, GETs the full scale set, PUTs it back whole, and reads VMs and
instance views -- each through azure-mgmt-resource's and azure-mgmt-compute's own clients and the
real managed-identity credential against the emulator's token endpoint."""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, Iterator, Tuple

import pytest
import requests

from vmss_terminate.control.pipeline import allow_loopback_http_policy
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.token import UNKNOWN_RESOURCE_MESSAGE, decode_claims

from .conftest import API, SUB, vmss_url

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.resource")


@pytest.fixture
def identity(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The real managed-identity credential (App Service env pointing at the token endpoint)."""
    from azure.identity import ManagedIdentityCredential

    for name, value in arm.env.items():
        monkeypatch.setenv(name, value)
    return ManagedIdentityCredential(retry_total=0)


@pytest.fixture
def resources(arm: ArmServers, identity: Any) -> Iterator[Any]:
    from azure.mgmt.resource.resources import ResourceManagementClient

    with ResourceManagementClient(identity, SUB, base_url=arm.arm_url,
                                  per_call_policies=[allow_loopback_http_policy()]) as client:
        yield client


def _compute(arm: ArmServers, credential: Any, **kwargs: Any) -> Any:
    from azure.mgmt.compute import ComputeManagementClient

    return ComputeManagementClient(credential, SUB, base_url=arm.arm_url, polling_interval=0,
                                   per_call_policies=[allow_loopback_http_policy()], **kwargs)


# ---------------------------------------------------------------- 1. token audiences


def test_a_token_for_the_emulators_advertised_endpoint_is_accepted(arm: ArmServers, identity: Any) -> None:
    """The scope a tool derives from the cloud metadata: `<resourceManager>.default`."""
    metadata = requests.get(f"{arm.arm_url}/metadata/endpoints", params={"api-version": "2022-09-01"}).json()
    scope = metadata["resourceManager"] + ".default"
    with _compute(arm, identity, credential_scopes=[scope]) as client:
        assert client.virtual_machine_scale_sets.get("rg", "myvmss").name == "myvmss"
    asked = [r.query["resource"][0] for r in arm.token_server.log.all()]
    assert [a.rstrip("/") for a in asked] == [arm.arm_url]  # MSAL strips "/.default"
    token = arm.tokens.recently_issued[-1]  # this test's (the module's servers keep earlier tests' tokens too)
    assert decode_claims(token)["aud"] == asked[0]


@pytest.mark.parametrize("audience", ["https://management.azure.com/", "https://management.azure.com",
                                      "https://management.core.windows.net/", "HTTPS://MANAGEMENT.CORE.WINDOWS.NET"])
def test_arm_accepts_the_audiences_public_azure_accepts(arm: ArmServers, identity: Any, audience: str) -> None:
    with _compute(arm, identity, credential_scopes=[audience.rstrip("/") + "/.default"]) as client:
        assert client.virtual_machine_scale_sets.get("rg", "myvmss").name == "myvmss"


def test_the_token_endpoint_refuses_an_unknown_resource_like_app_service(arm: ArmServers, identity: Any) -> None:
    from azure.core.exceptions import ClientAuthenticationError

    with pytest.raises(ClientAuthenticationError, match="unexpected error occured while fetching the AAD Token"):
        identity.get_token("https://managements.azure.com/.default")  # a typo: no such resource principal
    answer = requests.get(arm.token_url, params={"api-version": "2019-08-01", "resource": "https://vault.example"},
                          headers={"X-IDENTITY-HEADER": arm.env["IDENTITY_HEADER"]})
    body = answer.json()
    assert (answer.status_code, body["statusCode"], body["message"]) == (500, 500, UNKNOWN_RESOURCE_MESSAGE)
    assert body["correlationId"] and "access_token" not in body
    assert arm.arm_server.log.count() == 0


# ---------------------------------------------------------------- 2. resource groups


def test_resource_group_read_with_the_sdks_own_client(arm: ArmServers, resources: Any) -> None:
    arm.state.add_resource_group(SUB, "rg", tags={"team": "platform"})
    arm.state.add_scale_set(SUB, "rg-east", "east", capacity=1, location="eastus")
    group = resources.resource_groups.get("RG")  # names are case-insensitive, as in ARM
    assert (group.id, group.name, group.location, group.tags) == (f"/subscriptions/{SUB}/resourceGroups/rg", "rg",
                                                                    "westus", {"team": "platform"})
    assert group.properties.provisioning_state == "Succeeded"
    assert group.type == "Microsoft.Resources/resourceGroups"
    assert [(g.name, g.location) for g in resources.resource_groups.list()] == [("rg", "westus"),
                                                                                 ("rg-east", "eastus")]
    assert resources.resource_groups.check_existence("rg") is True
    assert resources.resource_groups.check_existence("missing") is False
    sent = [(r.method, r.path) for r in arm.arm_server.log.all()]
    assert sent[0] == ("GET", f"/subscriptions/{SUB}/resourcegroups/RG")


def test_an_unknown_resource_group_is_arms_404(arm: ArmServers, resources: Any) -> None:
    from azure.core.exceptions import ResourceNotFoundError

    with pytest.raises(ResourceNotFoundError) as caught:
        resources.resource_groups.get("missing")
    assert caught.value.error.code == "ResourceGroupNotFound"
    assert caught.value.error.message == "Resource group 'missing' could not be found."
    assert caught.value.response.status_code == 404


def test_resource_groups_come_from_the_seed(arm: ArmServers, resources: Any) -> None:
    state = ArmState()
    state.load_seed({
        "resourceGroups": [{"subscription": SUB, "name": "rg-tagged", "location": "northeurope",
                            "tags": {"cost-center": "42"}}],
        "scaleSets": [{"subscription": SUB, "resourceGroup": "rg-tagged", "name": "a", "location": "westeurope"},
                      {"subscription": SUB, "resourceGroup": "rg-plain", "name": "b", "location": "uksouth"}],
    })
    arm.reset(state)
    shapes = {g.name: (g.location, g.tags) for g in resources.resource_groups.list()}
    assert shapes == {"rg-tagged": ("northeurope", {"cost-center": "42"}), "rg-plain": ("uksouth", None)}


# ---------------------------------------------------------------- 3. complete scale-set bodies

# The 2024-11-01 VirtualMachineScaleSet_Create_WithTerminateScheduledEventEnabled example
# (azure-rest-api-specs, MIT): its request, and the model its 200 answer shows.
EXAMPLE_SUBNET = (f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet"
                  "/subnets/default")
EXAMPLE_REQUEST: Dict[str, Any] = {
    "sku": {"tier": "Standard", "capacity": 3, "name": "Standard_D1_v2"},
    "location": "westus",
    "properties": {
        "overprovision": True,
        "virtualMachineProfile": {
            "storageProfile": {
                "imageReference": {"sku": "2016-Datacenter", "publisher": "MicrosoftWindowsServer",
                                   "version": "latest", "offer": "WindowsServer"},
                "osDisk": {"caching": "ReadWrite", "managedDisk": {"storageAccountType": "Standard_LRS"},
                           "createOption": "FromImage"},
            },
            "osProfile": {"computerNamePrefix": "web", "adminUsername": "azureuser", "adminPassword": "secret!"},
            "networkProfile": {"networkInterfaceConfigurations": [{
                "name": "web", "properties": {"primary": True, "enableIPForwarding": True, "ipConfigurations": [
                    {"name": "web", "properties": {"subnet": {"id": EXAMPLE_SUBNET}}}]}}]},
            "scheduledEventsProfile": {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}},
        },
        "upgradePolicy": {"mode": "Manual"},
    },
}
EXAMPLE_ANSWER_PROFILE: Dict[str, Any] = {
    "storageProfile": EXAMPLE_REQUEST["properties"]["virtualMachineProfile"]["storageProfile"],
    "osProfile": {"computerNamePrefix": "web", "adminUsername": "azureuser", "secrets": [],
                  "windowsConfiguration": {"provisionVMAgent": True, "enableAutomaticUpdates": True}},
    "networkProfile": {"networkInterfaceConfigurations": [{"name": "web", "properties": {
        "dnsSettings": {"dnsServers": []}, "primary": True, "enableIPForwarding": True,
        "ipConfigurations": [{"name": "web", "properties": {"subnet": {"id": EXAMPLE_SUBNET},
                                                            "privateIPAddressVersion": "IPv4"}}],
        "enableAcceleratedNetworking": False}}]},
    "scheduledEventsProfile": {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}},
}


def _raw(arm: ArmServers, name: str, api: str = "2024-11-01") -> Dict[str, Any]:
    """The scale set's GET answer as JSON (what the SDK parsed)."""
    token = arm.tokens.issue()
    answer = requests.get(vmss_url(arm, name), params={"api-version": api}, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_a_created_scale_set_reads_back_as_azures_example_answer(arm: ArmServers, identity: Any) -> None:
    with _compute(arm, identity) as client:
        created = client.virtual_machine_scale_sets.begin_create_or_update("rg", "web", EXAMPLE_REQUEST).result()
    assert created.provisioning_state == "Succeeded"
    body = _raw(arm, "web")
    assert body["properties"]["virtualMachineProfile"] == EXAMPLE_ANSWER_PROFILE  # adminPassword never returned
    properties = body["properties"]
    assert (properties["singlePlacementGroup"], properties["overprovision"], properties["platformFaultDomainCount"],
            properties["orchestrationMode"]) == (True, True, 5, "Uniform")
    assert properties["uniqueId"] and properties["timeCreated"].endswith("+00:00")
    assert "zones" not in body


def test_seeded_and_generated_scale_sets_have_complete_bodies(arm: ArmServers) -> None:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 2, "subscriptions": 1, "capacity": 1}, "scaleSets": [
        {"subscription": SUB, "resourceGroup": "rg", "name": "win", "zones": ["1", "3"],
         "virtualMachineProfile": {"storageProfile": {"imageReference": {
             "publisher": "MicrosoftWindowsServer", "offer": "WindowsServer", "sku": "2022-datacenter",
             "version": "latest"}}}}]})
    arm.reset(state)
    for ss in state.scale_sets():
        profile = _raw(arm, ss.name) if ss.subscription == SUB else {"properties": {
            "virtualMachineProfile": ss.vm_profile}}
        vm_profile = profile["properties"]["virtualMachineProfile"]
        assert vm_profile["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]["ipConfigurations"]
        assert vm_profile["storageProfile"]["osDisk"]["managedDisk"]["storageAccountType"]
        assert vm_profile["storageProfile"]["osDisk"]["caching"] == "ReadWrite"
        assert vm_profile["osProfile"]["computerNamePrefix"] and vm_profile["osProfile"]["adminUsername"]
        assert ("windowsConfiguration" in vm_profile["osProfile"]) == (ss.name == "win")
        assert ("linuxConfiguration" in vm_profile["osProfile"]) == (ss.name != "win")
    win = _raw(arm, "win")
    assert win["zones"] == ["1", "3"] and win["properties"]["platformFaultDomainCount"] == 1
    assert win["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"]["sku"] == "2022-datacenter"


# ---------------------------------------------------------------- 6. the full-model PUT round trip


def _rich(arm: ArmServers) -> None:
    arm.state.load_seed({"scaleSets": [{
        "subscription": SUB, "resourceGroup": "rg", "name": "rich", "capacity": 2, "zones": ["1", "2"],
        "tags": {"team": "platform"}, "singlePlacementGroup": False, "overprovision": False,
        "scaleInPolicy": {"rules": ["OldestVM"], "forceDeletion": False},
        "automaticRepairsPolicy": {"enabled": True, "gracePeriod": "PT30M"},
        "scheduledEventsProfile": {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}},
        "scheduledEventsPolicy": {  # issue 24: the top-level policy survives the SDK's GET -> PUT
            "scheduledEventsAdditionalPublishingTargets": {
                "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}},
            "userInitiatedReboot": {"automaticallyApprove": True},
            "userInitiatedRedeploy": {"automaticallyApprove": False},
            "allInstancesDown": {"automaticallyApprove": True}},
    }]})


def test_get_modify_put_changes_only_the_terminate_notification(arm: ArmServers, identity: Any) -> None:
    from azure.mgmt.compute.models import ScheduledEventsProfile, TerminateNotificationProfile

    _rich(arm)
    before = _raw(arm, "rich")
    with _compute(arm, identity) as client:
        vmss = client.virtual_machine_scale_sets.get("rg", "rich")
        vmss.virtual_machine_profile.scheduled_events_profile = ScheduledEventsProfile(
            terminate_notification_profile=TerminateNotificationProfile(enable=True, not_before_timeout="PT10M"))
        result = client.virtual_machine_scale_sets.begin_create_or_update("rg", "rich", vmss).result()
    assert result.virtual_machine_profile.scheduled_events_profile.terminate_notification_profile.not_before_timeout \
        == "PT10M"
    after = _raw(arm, "rich")
    tnp = ("properties", "virtualMachineProfile", "scheduledEventsProfile")
    assert _without(_without(after, tnp), ("etag",)) == _without(_without(before, tnp), ("etag",))  # byte for byte
    assert (before["etag"], after["etag"]) == ('"1"', '"2"')  # Azure's etag moves with every write
    assert after["properties"]["virtualMachineProfile"]["scheduledEventsProfile"] == {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
    policy = _raw(arm, "rich", "2025-04-01")["properties"]["scheduledEventsPolicy"]  # the whole policy
    assert policy["allInstancesDown"] == {"automaticallyApprove": True}
    assert policy["scheduledEventsAdditionalPublishingTargets"]["eventGridAndResourceGraph"][
        "scheduledEventsApiVersion"] == "2020-07-01"
    assert json.loads(sent_body(arm))["properties"]["scheduledEventsPolicy"] == policy  # the SDK sent it back whole
    sent = [r for r in arm.arm_server.log.all() if r.method == "PUT"]
    assert len(sent) == 1 and sent[0].query["api-version"] == ["2026-04-01"]
    with _compute(arm, identity) as client:  # the instances now run an older model
        assert not any(vm.latest_model_applied for vm in client.virtual_machine_scale_set_vms.list("rg", "rich"))


def sent_body(arm: ArmServers) -> bytes:
    return [r for r in arm.arm_server.log.all() if r.method == "PUT"][-1].body


def _without(body: Dict[str, Any], path: Tuple[str, ...]) -> Dict[str, Any]:
    out = copy.deepcopy(body)
    node = out
    for key in path[:-1]:
        node = node[key]
    node.pop(path[-1], None)
    return out


def test_a_put_with_a_stale_etag_is_refused(arm: ArmServers, identity: Any) -> None:
    """A tool guarding its GET -> PUT against a concurrent writer sends If-Match (Compute >= 2023-09-01)."""
    from azure.core import MatchConditions
    from azure.core.exceptions import HttpResponseError

    _rich(arm)
    unchanged = MatchConditions.IfNotModified
    with _compute(arm, identity, retry_total=0) as client:
        vmss = client.virtual_machine_scale_sets.get("rg", "rich")
        assert vmss.etag == '"1"'
        client.virtual_machine_scale_sets.begin_update("rg", "rich", {"tags": {"by": "someone else"}}).result()
        with pytest.raises(HttpResponseError) as caught:
            client.virtual_machine_scale_sets.begin_create_or_update("rg", "rich", vmss, etag=vmss.etag,
                                                                     match_condition=unchanged).result()
        assert (caught.value.status_code, caught.value.error.code) == (412, "PreconditionFailed")
        assert caught.value.error.message == 'Etag provided in if-match header "1" does not match etag "2" of resource.'
        fresh = client.virtual_machine_scale_sets.get("rg", "rich")
        client.virtual_machine_scale_sets.begin_create_or_update("rg", "rich", fresh, etag=fresh.etag,
                                                                 match_condition=unchanged).result()
    assert _raw(arm, "rich")["etag"] == '"3"'
    sent = [r.headers.get("If-Match") for r in arm.arm_server.log.all() if r.method == "PUT"]
    assert sent == ['"1"', '"2"']


@pytest.mark.parametrize("change, target", [
    (lambda v: setattr(v, "orchestration_mode", "Flexible"), "orchestrationMode"),
    (lambda v: setattr(v, "platform_fault_domain_count", 0), "platformFaultDomainCount"),
    (lambda v: setattr(v, "platform_fault_domain_count", 3), "platformFaultDomainCount"),
    (lambda v: setattr(v, "single_placement_group", True), "singlePlacementGroup"),
    (lambda v: setattr(v, "zones", ["1"]), "zones"),
    (lambda v: setattr(v, "zones", None), "zones"),
    (lambda v: setattr(v.virtual_machine_profile.storage_profile.os_disk, "create_option", "Attach"),
     "osDisk.createOption"),
])
def test_changing_a_create_time_property_is_refused_like_azure(arm: ArmServers, identity: Any, change: Any,
                                                               target: str) -> None:
    from azure.core.exceptions import HttpResponseError

    _rich(arm)
    before = _raw(arm, "rich")
    with _compute(arm, identity, retry_total=0) as client:
        vmss = client.virtual_machine_scale_sets.get("rg", "rich")
        change(vmss)
        with pytest.raises(HttpResponseError) as caught:
            client.virtual_machine_scale_sets.begin_create_or_update("rg", "rich", vmss).result()
    assert caught.value.status_code == 409
    assert (caught.value.error.code, caught.value.error.target) == ("PropertyChangeNotAllowed", target)
    assert caught.value.error.message == f"Changing property '{target}' is not allowed."
    assert _raw(arm, "rich") == before  # nothing applied


def test_a_put_that_omits_properties_keeps_some_and_resets_others(arm: ArmServers, http: requests.Session) -> None:
    _rich(arm)
    body = _raw(arm, "rich")
    for key in ("singlePlacementGroup", "platformFaultDomainCount", "orchestrationMode", "overprovision",
                "scaleInPolicy"):
        del body["properties"][key]
    del body["tags"]
    del body["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]
    answer = http.put(vmss_url(arm, "rich"), params={"api-version": API}, json=body)
    assert answer.status_code == 200, answer.text
    after = _raw(arm, "rich")["properties"]
    kept = (after["singlePlacementGroup"], after["platformFaultDomainCount"], after["orchestrationMode"])
    assert kept == (False, 1, "Uniform")
    assert after["overprovision"] is True  # reset to Azure's default
    assert "scaleInPolicy" not in after and "tags" not in _raw(arm, "rich")
    assert "scheduledEventsProfile" not in after["virtualMachineProfile"]  # a missing field is a changed field
    assert after["automaticRepairsPolicy"] == {"enabled": True, "gracePeriod": "PT30M"}


def test_a_patch_stores_the_top_level_properties_it_carries(arm: ArmServers, identity: Any) -> None:
    """begin_update (PATCH) used to drop scaleInPolicy, overprovision and the like silently."""
    from azure.core.exceptions import HttpResponseError

    _rich(arm)
    with _compute(arm, identity, retry_total=0) as client:
        client.virtual_machine_scale_sets.begin_update("rg", "rich", {"properties": {
            "overprovision": True, "scaleInPolicy": {"rules": ["NewestVM"]}}}).result()
        with pytest.raises(HttpResponseError) as caught:
            client.virtual_machine_scale_sets.begin_update("rg", "rich", {"properties": {
                "singlePlacementGroup": True}}).result()
    assert (caught.value.status_code, caught.value.error.code) == (409, "PropertyChangeNotAllowed")
    after = _raw(arm, "rich")
    assert after["properties"]["overprovision"] is True
    assert after["properties"]["scaleInPolicy"] == {"rules": ["NewestVM"], "forceDeletion": False}  # merged
    assert after["properties"]["singlePlacementGroup"] is False and after["zones"] == ["1", "2"]


def test_unknown_members_are_refused(arm: ArmServers, http: requests.Session) -> None:
    body = _raw(arm, "myvmss")
    body["properties"]["terminateNotifications"] = True
    answer = http.put(vmss_url(arm), params={"api-version": API}, json=body)
    error = answer.json()["error"]
    assert (answer.status_code, error["code"], error["message"]) == (400, "InvalidRequestFormat",
                                                                     "Cannot parse the request.")
    assert error["details"][0]["code"] == "InvalidJson"
    assert "Could not find member 'terminateNotifications'" in error["details"][0]["message"]
    del body["properties"]["terminateNotifications"]
    body["resources"] = []
    answer = http.put(vmss_url(arm), params={"api-version": API}, json=body)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "InvalidRequestContent")
    assert "'ResourceDefinition'. Path 'resources'" in answer.json()["error"]["message"]


def test_a_put_to_another_location_is_refused(arm: ArmServers, http: requests.Session) -> None:
    body = _raw(arm, "myvmss")
    body["location"] = "West US"  # ARM's display name of westus: the same region
    assert http.put(vmss_url(arm), params={"api-version": API}, json=body).status_code == 200
    body["location"] = "eastus"
    answer = http.put(vmss_url(arm), params={"api-version": API}, json=body)
    assert (answer.status_code, answer.json()["error"]["code"]) == (409, "InvalidResourceLocation")
    assert "cannot be created in location 'eastus'" in answer.json()["error"]["message"]
    assert _raw(arm, "myvmss")["location"] == "westus"


def test_a_fault_domain_count_of_zero_is_refused_not_dropped(arm: ArmServers, http: requests.Session) -> None:
    body = copy.deepcopy(EXAMPLE_REQUEST)
    body["properties"]["platformFaultDomainCount"] = 0
    answer = http.put(vmss_url(arm, "new"), params={"api-version": API}, json=body)
    error = answer.json()["error"]
    assert (answer.status_code, error["code"], error["target"]) == (400, "InvalidParameter", "platformFaultDomainCount")
    assert arm.state.scale_set(SUB, "rg", "new") is None
    existing = _raw(arm, "myvmss")
    existing["properties"]["platformFaultDomainCount"] = 0
    answer = http.put(vmss_url(arm), params={"api-version": API}, json=existing)
    assert (answer.status_code, answer.json()["error"]["code"]) == (409, "PropertyChangeNotAllowed")


# ---------------------------------------------------------------- 4. instance view, 5. VM fields


def test_instance_view_with_the_sdks_own_client(arm: ArmServers, identity: Any) -> None:
    with _compute(arm, identity) as client:
        view = client.virtual_machine_scale_set_vms.get_instance_view("rg", "myvmss", "3")
        listed = list(client.virtual_machine_scale_set_vms.list("rg", "myvmss", expand="instanceView"))
    assert [s.code for s in view.statuses] == ["ProvisioningState/succeeded", "PowerState/running"]
    assert (view.platform_update_domain, view.platform_fault_domain) == (3, 3)
    assert (view.computer_name, view.os_name) == ("myvmss000003", "ubuntu")
    assert view.disks[0].statuses[0].code == "ProvisioningState/succeeded"
    assert all(vm.instance_view.statuses[1].code == "PowerState/running" for vm in listed)
    with _compute(arm, identity) as client:
        whole = client.virtual_machine_scale_sets.get_instance_view("rg", "myvmss")
    assert [(s.code, s.count) for s in whole.virtual_machine.statuses_summary] == [("ProvisioningState/succeeded", 4)]
    assert whole.statuses[0].code == "ProvisioningState/succeeded"
    sent = [r for r in arm.arm_server.log.all() if r.path.endswith("/instanceView") and "/virtualMachines/" in r.path]
    assert [r.path.rsplit("/", 2)[-2] for r in sent] == ["3"]
    assert any(r.query.get("$expand") == ["instanceView"] for r in arm.arm_server.log.all())


def test_vm_list_carries_the_profiles_a_real_get_returns(arm: ArmServers, identity: Any) -> None:
    with _compute(arm, identity) as client:
        vms = list(client.virtual_machine_scale_set_vms.list("rg", "myvmss"))
    vm = vms[0]
    assert (vm.latest_model_applied, vm.model_definition_applied, vm.provisioning_state) == (
        True, "VirtualMachineScaleSet", "Succeeded")
    assert vm.vm_id and vm.hardware_profile is not None
    assert vm.storage_profile.image_reference.offer == "0001-com-ubuntu-server-jammy"
    assert vm.storage_profile.os_disk.os_type == "Linux" and vm.storage_profile.os_disk.create_option == "FromImage"
    assert vm.storage_profile.os_disk.managed_disk.id.endswith(vm.storage_profile.os_disk.name)
    assert (vm.os_profile.computer_name, vm.os_profile.admin_username) == ("myvmss000000", "azureuser")
    assert vm.os_profile.linux_configuration.disable_password_authentication is True
    nic = vm.network_profile.network_interfaces[0].id
    assert nic.startswith(vm.id + "/networkInterfaces/")
    assert vm.network_profile_configuration.network_interface_configurations[0].primary is True
    assert len({v.vm_id for v in vms}) == 4


def test_flexible_members_carry_their_profiles_too(arm: ArmServers, identity: Any) -> None:
    arm.state.add_scale_set(SUB, "rg", "flex", orchestration="Flexible", capacity=1)
    with _compute(arm, identity) as client:
        vm = list(client.virtual_machines.list("rg"))[0]
        with pytest.raises(Exception, match="OperationNotAllowed"):
            client.virtual_machine_scale_set_vms.get_instance_view("rg", "flex", vm.name)
    assert vm.virtual_machine_scale_set.id.endswith("/virtualMachineScaleSets/flex")
    assert vm.storage_profile.os_disk.managed_disk.id.endswith(vm.storage_profile.os_disk.name)
    assert "/Microsoft.Network/networkInterfaces/" in vm.network_profile.network_interfaces[0].id
    assert vm.os_profile.admin_username == "azureuser"
