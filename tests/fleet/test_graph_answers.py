"""Resource Graph answers that cannot be the estate fail the audit (AzureError, exit 1), never pass
for "0 scale sets" nor blame the user: data that is not a list, a row that is not an object, no
totalRecords, a scale set row without a usable id. And a computeresources summary that lags the
set's capacity is not trusted: the ARM list decides."""

from __future__ import annotations

import json
import re
from typing import Any, Dict

import pytest

from vmss_terminate.control import Connection
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet import audit
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import run

GRAPH = "/providers/Microsoft.ResourceGraph/resources"


def _answer(arm: ArmServers, body: Dict[str, Any]) -> None:
    arm.arm_server.faults.add(status=200, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                              method="POST", path_contains=GRAPH, times=None)


ROW = {"name": "web", "type": "microsoft.compute/virtualmachinescalesets", "properties": {}}


@pytest.mark.parametrize("body, said", [
    ({"totalRecords": 1, "count": 1, "data": {"rows": []}, "resultTruncated": "false"}, "not a list of rows"),
    ({"totalRecords": 1, "count": 1, "data": [1], "resultTruncated": "false"}, "row that is not an object (int)"),
    ({"count": 1, "data": [], "resultTruncated": "false"}, "without totalRecords"),
    ({"totalRecords": 1, "count": 1, "data": [dict(ROW, id="")], "resultTruncated": "false"},
     "scale set row without a usable id"),
    ({"totalRecords": 1, "count": 1, "data": [dict(ROW, id="/subscriptions/x/web")], "resultTruncated": "false"},
     "scale set row without a usable id"),
], ids=["data-not-a-list", "row-not-an-object", "no-total-records", "empty-id", "id-without-group"])
def test_an_unusable_graph_answer_fails_the_audit(arm: ArmServers, conn: Connection, body: Dict[str, Any],
                                                  said: str) -> None:
    _answer(arm, body)
    with pytest.raises(AzureError, match=re.escape(said)):
        audit(connection=conn)
    result = run("fleet", "audit")
    assert result.exit_code == 1, result.output
    assert said in result.stderr and "Traceback" not in result.output


def test_a_summary_that_lags_the_capacity_is_not_trusted(arm: ArmServers, conn: Connection) -> None:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 6, "subscriptions": 1, "capacity": 3, "special": False},
                     "resourceGraphComputeResources": True, "resourceGraphModelReported": True})
    arm.reset(state)
    first = audit(connection=conn)
    assert first.calls["instance_lists"] == 0  # the summary was trusted for every set
    counted = next(r for r in first.scale_sets if r.enabled and r.uniform and r.instances == 3)
    lagging = next(ss for ss in state.scale_sets() if ss.resource_id.lower() == counted.id.lower())
    lagging.capacity += 2  # the resources table says 5; computeresources still has the 3 it indexed
    arm.arm_server.log.clear()
    report = audit(connection=conn)
    assert report.calls["instance_lists"] == 1  # only the lagging set's ARM list is read
    listed = [r for r in arm.arm_server.log.find("GET") if r.path.endswith("/virtualMachines")]
    assert [r.path.lower() for r in listed] == [f"{lagging.resource_id.lower()}/virtualmachines"]


@pytest.mark.parametrize("body", [b"<html><body>502 Bad Gateway</body></html>", b"{not json", b""],
                         ids=["html", "broken-json", "empty"])
def test_a_graph_answer_that_is_not_json_is_named_not_the_sdk(arm: ArmServers, body: bytes) -> None:
    """Issue 28 item 9: an answer that is not JSON is one line saying what Resource Graph answered -- not the
    SDK's deserialisation internals."""
    arm.arm_server.faults.add(status=200, body=body, headers={"Content-Type": "application/json"},
                              method="POST", path_contains=GRAPH, times=None)
    result = run("fleet", "audit")
    assert result.exit_code == 1, result.output
    assert "Azure Resource Graph answered 200" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for internal in ("Traceback", "DeserializationError", "azure.core", "msrest", "JSONDecodeError"):
        assert internal not in result.output + result.stderr
