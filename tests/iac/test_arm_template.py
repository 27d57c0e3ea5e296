"""templates/arm: deploys the control plane's profile for every accepted timeout and refuses the rest."""

from __future__ import annotations

import base64
from typing import Any, Dict

import pytest
import yaml

from vmss_terminate.iac.render import scheduled_events_profile

from .arm_eval import ArmError, Deployment
from .conftest import MINUTES, load_json

TEMPLATE = "arm/azuredeploy.json"
REQUIRED = {"vmssName": "myvmss", "subnetId": "/subscriptions/s/resourceGroups/rg/providers/x/subnets/a",
            "adminSshPublicKey": "ssh-ed25519 AAAA test"}


def _scale_set(values: Dict[str, Any]) -> Dict[str, Any]:
    template = load_json(TEMPLATE)
    (resource,) = [r for r in template["resources"] if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"]
    return Deployment(template, {**REQUIRED, **values}).value(resource)


def test_api_version_knows_scheduled_events_profile() -> None:
    template = load_json(TEMPLATE)
    for resource in template["resources"]:
        assert resource["apiVersion"] >= "2019-03-01"  # older versions reject scheduledEventsProfile


def test_timeout_parameter_is_minutes_5_to_15() -> None:
    spec = load_json(TEMPLATE)["parameters"]["terminateNotificationMinutes"]
    assert (spec["type"], spec["minValue"], spec["maxValue"]) == ("int", 5, 15)
    assert 5 <= spec["defaultValue"] <= 15


@pytest.mark.parametrize("minutes", MINUTES)
def test_deployed_profile_is_the_control_plane_profile(minutes: int) -> None:
    scale_set = _scale_set({"terminateNotificationMinutes": minutes})
    assert scale_set["properties"]["virtualMachineProfile"]["scheduledEventsProfile"] == \
        scheduled_events_profile(True, minutes)


def test_default_is_enabled() -> None:
    profile = _scale_set({})["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]
    assert profile["terminateNotificationProfile"]["enable"] is True


@pytest.mark.parametrize("minutes", [0, 4, 16, 60])
def test_out_of_range_minutes_are_refused(minutes: int) -> None:
    with pytest.raises(ArmError, match="terminateNotificationMinutes"):
        _scale_set({"terminateNotificationMinutes": minutes})


def test_custom_data_is_the_cloud_init_with_the_package_source(cloud_init_text: str) -> None:
    scale_set = _scale_set({"cloudInit": cloud_init_text,
                            "agentPipArgs": "--no-index --find-links https://wheels.example/ vmss-terminate==0.1.0",
                            "agentArgs": "--hook /etc/vmss-terminate/hooks/drain"})
    encoded = scale_set["properties"]["virtualMachineProfile"]["osProfile"]["customData"]
    cloud_init = yaml.safe_load(base64.b64decode(encoded).decode("utf-8"))
    files = {f["path"]: f["content"] for f in cloud_init["write_files"]}
    assert "VMSS_TERMINATE_PIP_ARGS=--no-index --find-links https://wheels.example/ vmss-terminate==0.1.0\n" in \
        files["/etc/vmss-terminate/install.env"]
    assert "VMSS_TERMINATE_AGENT_ARGS=--hook /etc/vmss-terminate/hooks/drain\n" in files["/etc/vmss-terminate/agent.env"]


def test_no_cloud_init_means_no_custom_data() -> None:
    assert _scale_set({})["properties"]["virtualMachineProfile"]["osProfile"]["customData"] is None


def test_outputs_report_the_timeout() -> None:
    template = load_json(TEMPLATE)
    deployment = Deployment(template, {**REQUIRED, "terminateNotificationMinutes": 12})
    assert deployment.value(template["outputs"]["terminateNotificationTimeout"]["value"]) == "PT12M"


def test_not_a_spot_scale_set() -> None:
    # Terminate notifications cannot be enabled on Spot instances.
    assert "priority" not in load_json(TEMPLATE)["resources"][0]["properties"]["virtualMachineProfile"]
