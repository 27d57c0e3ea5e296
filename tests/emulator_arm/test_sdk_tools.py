"""What an SDK-based configuration tool sends (issue 18): it takes the token scope from the cloud
metadata, reads the resource group, GETs the full scale set, PUTs it back whole, and reads VMs and
instance views -- each through azure-mgmt-resource's and azure-mgmt-compute's own clients and the
real managed-identity credential against the emulator's token endpoint."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import requests

from vmss_terminate.control.pipeline import allow_loopback_http_policy
from vmss_terminate.emulator.arm.app import ArmServers, ArmState
from vmss_terminate.emulator.arm.token import UNKNOWN_RESOURCE_MESSAGE, decode_claims

from .conftest import SUB

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
    token = next(iter(arm.tokens.recently_issued))
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
