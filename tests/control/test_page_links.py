"""A bad page link is the answer's fault, said so (issue 28 item 9): a `nextLink` that is not an
absolute http(s) URL, points off the ARM endpoint, or that ARM refuses when it is followed (404, 400,
410: an unknown or expired link) fails the listing with one line naming the list being read and
the link -- never "scale set rg/web not found" (a 404 on page 2 was read as the scale set's own)."""

from __future__ import annotations

import json

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

SET_PATH = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/web"


def _page_with_link(arm: ArmServers, link: str, path: str = "/web/virtualMachines") -> None:
    body = json.dumps({"value": [], "nextLink": link.replace("{arm}", arm.arm_url)}).encode()
    arm.arm_server.faults.add(method="GET", path_contains=path, status=200, body=body,
                              headers={"Content-Type": "application/json"})


def _one_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: listing "), result.stderr
    assert "not found" not in lines[0].split("(")[0]  # never a missing resource of ours
    assert "Traceback" not in result.output and "Error(" not in result.output
    return lines[0]


@pytest.mark.parametrize("link", ["not a url", "https://", "ftp://example.com/x", "http://[::1", "/relative?p=2"])
def test_a_malformed_next_link_is_named_as_the_answers(arm: ArmServers, state: ArmState, link: str) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    _page_with_link(arm, link)
    line = _one_line(run("status", "-g", RG, "-n", "web"))
    assert line.startswith("error: listing instances of rg/web: the nextLink of the answer to GET "
                           f"{SET_PATH}/virtualMachines (HTTP 200) is {link!r}"), line
    assert "not followed" in line and "run the command again" in line
    assert arm.arm_server.log.count("GET") == 2  # the set and the first page: nothing sent to the link


@pytest.mark.parametrize("link, answer", [
    ("{arm}" + SET_PATH.replace("/web", "/gone") + "/virtualMachines?p=2", "ParentResourceNotFound"),
    ("{arm}/nowhere", "(HTTP 404)"),
    ("{arm}" + SET_PATH + "/virtualMachines?$skiptoken=expired", "InvalidParameter"),
])
def test_a_next_link_arm_refuses_is_not_blamed_on_the_scale_set(arm: ArmServers, state: ArmState, link: str,
                                                                answer: str) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    _page_with_link(arm, link)
    line = _one_line(run("status", "-g", RG, "-n", "web"))
    assert line.startswith("error: listing instances of rg/web: ARM refused the nextLink of page 1 "
                           f"('{link.replace('{arm}', arm.arm_url)}'): "), line
    assert answer in line and "scale set rg/web not found" not in line
    assert "a fault in ARM's answer, not in the resources listed" in line


def test_a_gone_next_link_is_the_links(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    _page_with_link(arm, "{arm}" + SET_PATH + "/virtualMachines?$skiptoken=old")
    arm.arm_server.faults.add(method="GET", path_contains="/web/virtualMachines", status=410, body=b"")
    line = _one_line(run("status", "-g", RG, "-n", "web"))
    assert "ARM refused the nextLink of page 1" in line and "HTTP 410" in line


def test_a_foreign_next_link_names_the_list_being_read(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    _page_with_link(arm, "http://127.0.0.2:9/next")
    line = _one_line(run("status", "-g", RG, "-n", "web"))
    assert line.startswith("error: listing instances of rg/web: refused to follow a link to http://127.0.0.2:9"), line


def test_a_subscription_page_link_arm_refuses(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    state.add_subscription(SUB, display_name="Production")
    _page_with_link(arm, "{arm}/subscriptions?$skiptoken=gone", path="/subscriptions")
    arm.arm_server.faults.add(method="GET", path_contains="/subscriptions", status=404, body=b"")
    line = _one_line(run("status", "-g", RG, "-n", "web", "--subscription", "Production"))
    assert line.startswith("error: listing subscriptions: ARM refused the nextLink of page 1"), line
