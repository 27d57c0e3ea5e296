"""templates/bicep: parsed by pycep-parser (a Bicep grammar from PyPI), then its profile is evaluated."""

from __future__ import annotations

import re
from typing import Any, Dict

import pytest

from vmss_terminate.iac.render import scheduled_events_profile

from .conftest import MINUTES, TEMPLATES, load_json

pycep = pytest.importorskip("pycep", reason="pycep-parser (the Bicep parser) needs Python >= 3.10")

MODULE = TEMPLATES / "bicep" / "vmss-terminate.bicep"
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@pytest.fixture(scope="module")
def module() -> Dict[str, Any]:
    return pycep.BicepParser().parse(file_path=MODULE)


def _decorators(param: Dict[str, Any]) -> Dict[str, Any]:
    return {d["type"]: d.get("argument") for d in param["decorators"]}


def _bind(module: Dict[str, Any], values: Dict[str, Any]) -> Dict[str, Any]:
    """Parameter values after Bicep's decorator checks (what a deployment would accept)."""
    bound = {}
    for name, param in module["parameters"].items():
        value = values.get(name, param.get("default"))
        decorators = _decorators(param)
        if "min_value" in decorators and value < decorators["min_value"]:
            raise ValueError(f"{name}: {value} < @minValue({decorators['min_value']})")
        if "max_value" in decorators and value > decorators["max_value"]:
            raise ValueError(f"{name}: {value} > @maxValue({decorators['max_value']})")
        bound[name] = value
    return bound


def _resolve(node: Any, module: Dict[str, Any], params: Dict[str, Any]) -> Any:
    """Evaluate the plain parts of a pycep tree: identifiers, string interpolation, objects."""
    if isinstance(node, dict):
        return {k: _resolve(v, module, params) for k, v in node.items()}
    if isinstance(node, str):
        if node in params:
            return params[node]
        if node in module["variables"]:
            return _resolve(module["variables"][node]["value"], module, params)
        return _INTERPOLATION.sub(lambda m: str(_resolve(m.group(1), module, params)), node)
    return node


def test_module_parses_with_a_vmss_at_a_new_enough_api(module: Dict[str, Any]) -> None:
    (vmss,) = module["resources"].values()
    assert vmss["type"] == "Microsoft.Compute/virtualMachineScaleSets"
    assert vmss["api_version"] >= "2019-03-01"


def test_timeout_parameter_is_minutes_5_to_15(module: Dict[str, Any]) -> None:
    param = module["parameters"]["terminateNotificationMinutes"]
    assert param["type"] == "int"
    decorators = _decorators(param)
    assert (decorators["min_value"], decorators["max_value"]) == (5, 15)


@pytest.mark.parametrize("minutes", MINUTES)
def test_profile_is_the_control_plane_profile(module: Dict[str, Any], minutes: int) -> None:
    params = _bind(module, {"terminateNotificationMinutes": minutes})
    (vmss,) = module["resources"].values()
    profile = vmss["config"]["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]
    assert _resolve(profile, module, params) == scheduled_events_profile(True, minutes)


@pytest.mark.parametrize("minutes", [4, 16])
def test_out_of_range_minutes_are_refused(module: Dict[str, Any], minutes: int) -> None:
    with pytest.raises(ValueError, match="terminateNotificationMinutes"):
        _bind(module, {"terminateNotificationMinutes": minutes})


def test_same_parameters_as_the_arm_template(module: Dict[str, Any]) -> None:
    arm = load_json("arm/azuredeploy.json")["parameters"]
    # ARM has no loadTextContent, so it takes the cloud-init text; Bicep loads the file and has a switch.
    assert set(arm) - {"cloudInit"} == set(module["parameters"]) - {"installAgent"}
    for name, spec in arm.items():
        if "minValue" in spec:
            decorators = _decorators(module["parameters"][name])
            assert (decorators["min_value"], decorators["max_value"]) == (spec["minValue"], spec["maxValue"])


def test_cloud_init_is_loaded_from_the_shared_file(module: Dict[str, Any]) -> None:
    text = MODULE.read_text(encoding="utf-8")
    paths = re.findall(r"loadTextContent\('([^']+)'\)", text)
    assert paths == ["../cloud-init/vmss-terminate.yaml"]
    assert (MODULE.parent / paths[0]).resolve() == (TEMPLATES / "cloud-init" / "vmss-terminate.yaml")
