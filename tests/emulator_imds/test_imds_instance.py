"""Instance metadata over real HTTP: the document, route filtering, format rules, versions, 404/405."""

from __future__ import annotations

import pytest

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator
from vmss_terminate_sim.emulator.imds.versions import INSTANCE_VERSIONS

pytestmark = pytest.mark.timeout(30)

V = "2021-02-01"


def test_full_document_has_compute_and_network(vm, imds, group) -> None:
    reply = imds.get(vm, "/metadata/instance", {"api-version": V})
    assert reply.status_code == 200 and reply.headers["Content-Type"].startswith("application/json")
    doc = reply.json()
    compute = doc["compute"]
    assert compute["name"] == "myvmss_3"
    assert compute["vmScaleSetName"] == "myvmss"
    assert compute["subscriptionId"] == "00000000-0000-0000-0000-000000000000"
    assert compute["resourceGroupName"] == "myresourcegroup"
    assert compute["resourceId"] == (
        "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/myresourcegroup/providers/"
        "Microsoft.Compute/virtualMachineScaleSets/myvmss/virtualMachines/3"
    )
    assert compute["placementGroupId"] == group.id
    assert compute["location"] and compute["vmId"] and compute["osType"] == "Linux"
    assert doc["network"]["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"] == "10.0.0.4"


def test_primitives_are_strings(vm, imds) -> None:
    compute = imds.get(vm, "/metadata/instance/compute", {"api-version": V}).json()
    assert compute["platformFaultDomain"] == "0" and compute["zone"] == ""


def test_compute_subtree(vm, imds) -> None:
    reply = imds.get(vm, "/metadata/instance/compute", {"api-version": V, "format": "json"})
    assert reply.status_code == 200 and reply.json()["name"] == "myvmss_3"


@pytest.mark.parametrize("path, value", [
    ("/metadata/instance/compute/name", "myvmss_3"),
    ("/metadata/instance/compute/vmScaleSetName", "myvmss"),
    ("/metadata/instance/compute/osProfile/computerName", "myvmss_3"),
    ("/metadata/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress", "10.0.0.4"),
])
def test_leaf_with_format_text(vm, imds, path, value) -> None:
    reply = imds.get(vm, path, {"api-version": V, "format": "text"})
    assert reply.status_code == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    assert reply.text == value


@pytest.mark.parametrize("params", [{"api-version": V}, {"api-version": V, "format": "json"}])
def test_leaf_with_json_format_is_400(vm, imds, params) -> None:
    reply = imds.get(vm, "/metadata/instance/compute/name", params)
    assert reply.status_code == 400 and "format=text" in reply.json()["error"]


def test_text_format_on_a_subtree_lists_children(vm, imds) -> None:
    reply = imds.get(vm, "/metadata/instance", {"api-version": V, "format": "text"})
    assert reply.text.splitlines() == ["compute/", "network/"]


def test_unknown_format_is_400(vm, imds) -> None:
    assert imds.get(vm, "/metadata/instance", {"api-version": V, "format": "xml"}).status_code == 400


@pytest.mark.parametrize("path", ["/metadata/instance/compute/nope", "/metadata/instance/network/interface/9",
                                  "/metadata/nothing", "/", "/metadata/identity/oauth2/token"])
def test_unknown_paths_are_404(vm, imds, path) -> None:
    assert imds.get(vm, path, {"api-version": V}).status_code == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_instance_is_get_only(vm, imds, method) -> None:
    reply = imds.session.request(method, vm.url + "/metadata/instance", params={"api-version": V},
                                 headers={"Metadata": "true"}, timeout=10)
    assert reply.status_code == 405


def test_instance_rules_apply(vm, imds) -> None:
    assert imds.get(vm, "/metadata/instance", {"api-version": V}, headers={}).status_code == 400
    assert imds.get(vm, "/metadata/instance", {"api-version": V},
                    headers={"Metadata": "true", "X-Forwarded-For": "10.0.0.1"}).status_code == 400
    dup = imds.get(vm, f"/metadata/instance?api-version={V}&format=json&format=json")
    assert dup.status_code == 400


def test_instance_versions_are_their_own_list(vm, imds) -> None:
    # 2019-01-01 is a Scheduled Events version, not an instance one.
    reply = imds.get(vm, "/metadata/instance", {"api-version": "2019-01-01"})
    assert reply.status_code == 400
    assert reply.json()["newest-versions"] == ["2025-04-07", "2024-07-17", "2024-03-15"]
    assert imds.get(vm, "/metadata/instance").status_code == 400
    for version in ("2017-04-02", "2025-04-07"):
        assert imds.get(vm, "/metadata/instance", {"api-version": version}).status_code == 200


def test_compute_fields_follow_the_version(vm, imds) -> None:
    def compute(version: str) -> dict:
        return imds.get(vm, "/metadata/instance/compute", {"api-version": version}).json()

    assert "vmScaleSetName" not in compute("2017-08-01") and "subscriptionId" in compute("2017-08-01")
    assert "vmScaleSetName" in compute("2017-12-01") and "resourceId" not in compute("2019-02-01")
    assert "resourceId" in compute("2019-03-11")
    oldest = compute("2017-04-02")
    assert {"azEnvironment", "provider", "tags", "tagsList"}.isdisjoint(oldest) and "name" in oldest
    assert {"azEnvironment", "provider", "tags"} <= set(compute("2018-10-01"))
    assert "tagsList" not in compute("2019-06-01") and "tagsList" in compute("2019-06-04")
    assert imds.get(vm, "/metadata/instance/compute/resourceId",
                    {"api-version": "2019-02-01", "format": "text"}).status_code == 404


def test_versions_endpoint_is_unversioned(vm, imds) -> None:
    reply = imds.get(vm, "/metadata/versions")
    assert reply.status_code == 200
    assert reply.json()["apiVersions"] == list(INSTANCE_VERSIONS)
    assert imds.get(vm, "/metadata/versions", headers={}).status_code == 400


def test_identity_overrides_and_flexible_naming(group, serve, imds) -> None:
    server = serve(ImdsEmulator(group, "web_a1b2c3d4", rate_limit=None, subscription_id="sub-1",
                                resource_group="rg-1", location="eastus", compute={"zone": "2"}))
    compute = imds.get(server, "/metadata/instance/compute", {"api-version": V}).json()
    assert compute["vmScaleSetName"] == "web" and compute["zone"] == "2" and compute["location"] == "eastus"
    assert compute["resourceId"] == (
        "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Compute/virtualMachines/web_a1b2c3d4"
    )


def test_explicit_resource_id_and_standalone_vm(group, serve, imds) -> None:
    rid = "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/virtualMachines/solo"
    server = serve(ImdsEmulator(group, "solo", resource_id=rid, rate_limit=None))
    compute = imds.get(server, "/metadata/instance/compute", {"api-version": V}).json()
    assert compute["resourceId"] == rid and compute["vmScaleSetName"] == ""
