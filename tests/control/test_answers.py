"""Messages describe what Azure answered ("a JSON list where a JSON object was expected"), never a
Python exception name, for every read the control plane makes."""

from __future__ import annotations

import re

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

PYTHON_NAMES = re.compile(r"\b\w*(Error|Exception)\b")


@pytest.mark.parametrize("path, body, said", [
    ("/virtualMachineScaleSets/web", b"[1, 2]",
     "reading scale set rg/web: ARM answered 200 with a JSON list where a JSON object was expected"),
    ("/virtualMachineScaleSets/web", b"<html>",
     "reading scale set rg/web: ARM answered 200 with text that is not JSON ('<html>') where a JSON object"),
    ("/web/virtualMachines", b'{"value": {"a": 1}}',
     "listing instances of rg/web: ARM answered a JSON object for 'value' where a JSON list was expected"),
    ("/web/virtualMachines", b'{"value": [1]}',
     "listing instances of rg/web: ARM answered a JSON number in 'value' where a JSON object was expected"),
    ("/web/virtualMachines", b"null", "listing instances of rg/web: ARM answered 200 with JSON null where"),
], ids=["set-list", "set-html", "value-object", "value-number", "page-null"])
def test_an_answer_of_the_wrong_shape_is_named_in_azure_terms(arm: ArmServers, state: ArmState, path: str,
                                                             body: bytes, said: str) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    arm.arm_server.faults.add(status=200, body=body, method="GET", path_contains=path,
                              headers={"Content-Type": "application/json"})
    result = run("status", "-g", RG, "-n", "web")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert not PYTHON_NAMES.search(lines[0]), lines[0]


@pytest.mark.parametrize("body, said", [
    (b"<html>", "looking up subscription 'Production': ARM answered 200 with text that is not JSON ('<html>') where "
                 "JSON was expected"),
    (b'{"value": 3}', "GET /subscriptions answered a JSON number for 'value' where a JSON list was expected"),
    (b"[1]", "GET /subscriptions answered 200 with a JSON list where a JSON object was expected"),
], ids=["html", "value-number", "list"])
def test_a_subscription_list_of_the_wrong_shape_is_named_in_azure_terms(arm: ArmServers, state: ArmState,
                                                                       body: bytes, said: str) -> None:
    state.add_subscription(SUB, display_name="Production")
    arm.arm_server.faults.add(status=200, body=body, method="GET", path_contains="/subscriptions",
                              headers={"Content-Type": "application/json"})
    result = run("status", "-g", RG, "-n", "web", "--subscription", "Production")
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert said in line and "\n" not in line, line
    assert not PYTHON_NAMES.search(line), line
