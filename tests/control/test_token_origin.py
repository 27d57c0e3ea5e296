"""The token goes only to the ARM endpoint's origin: every link kind an answer can carry that points
elsewhere (another port of 127.0.0.1 here) is refused before anything is sent to it -- exit 1, one
line naming the refused origin and the answer that carried the link -- and a second server records
that no request at all (with or without the header) reached it."""

from __future__ import annotations

from typing import Iterator

import pytest
from helpers import RecordingServer

from vmss_terminate.control.origin import OriginGuard, origin_of
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

SET_PATH = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/web"


@pytest.fixture
def elsewhere() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


def _refused(result, elsewhere: RecordingServer, carrier: str) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    line = lines[0]
    assert f"refused to follow a link to {elsewhere.origin}" in line
    assert carrier in line
    assert elsewhere.requests == []  # nothing reached it, with or without the token
    return line


def test_a_vm_list_next_link_elsewhere(arm: ArmServers, state: ArmState, elsewhere: RecordingServer) -> None:
    state.page_size = 1
    state.add_scale_set(SUB, RG, "web", capacity=3)
    arm.arm_server.faults.add(method="GET", path_contains="/web/virtualMachines", foreign_link=elsewhere.origin)
    _refused(run("status", "-g", RG, "-n", "web"), elsewhere,
             f"the nextLink of the answer to GET {SET_PATH}/virtualMachines (HTTP 200)")


def test_the_patch_operation_elsewhere(arm: ArmServers, state: ArmState, elsewhere: RecordingServer) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(method="PATCH", foreign_link=elsewhere.origin)
    line = _refused(run("enable", "-g", RG, "-n", "web", "--timeout", "10m"), elsewhere,
                    f"the Azure-AsyncOperation header of the answer to PATCH {SET_PATH} (HTTP 200)")
    assert "no instances were upgraded" in line and f"vmss-terminate status -g rg -n web --subscription {SUB}" in line  # what is known
    assert arm.arm_server.log.count("POST") == 0


def test_the_manualupgrade_operation_elsewhere(arm: ArmServers, state: ArmState,
                                               elsewhere: RecordingServer) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2, stale_instances=2)
    arm.arm_server.faults.add(method="POST", path_contains="manualupgrade", foreign_link=elsewhere.origin)
    line = _refused(run("upgrade", "-g", RG, "-n", "web"), elsewhere,
                    f"the Azure-AsyncOperation header of the answer to POST {SET_PATH}/manualupgrade (HTTP 202)")
    assert "upgrade incomplete" in line


def test_the_manualupgrade_location_elsewhere(arm: ArmServers, state: ArmState, elsewhere: RecordingServer) -> None:
    """Azure-AsyncOperation on the endpoint, Location elsewhere: the wait would never follow the
    Location, and still the answer is refused before the first poll."""
    state.add_scale_set(SUB, RG, "web", capacity=2, stale_instances=2)
    status = f"{arm.arm_url}/subscriptions/{SUB}/providers/Microsoft.Compute/locations/westeurope/operations/x"
    arm.arm_server.faults.add(method="POST", path_contains="manualupgrade", status=202, body=b"", headers={
        "Azure-AsyncOperation": status, "Location": f"{elsewhere.origin}/operations/x?monitor=true"})
    _refused(run("upgrade", "-g", RG, "-n", "web"), elsewhere,
             f"the Location header of the answer to POST {SET_PATH}/manualupgrade (HTTP 202)")
    assert arm.arm_server.log.count("GET", "/operations/") == 0


def test_a_202_with_only_a_location_elsewhere(arm: ArmServers, state: ArmState, elsewhere: RecordingServer) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2, stale_instances=2)
    arm.arm_server.faults.add(method="POST", path_contains="manualupgrade", status=202, body=b"",
                              headers={"Location": f"{elsewhere.origin}/operations/x?monitor=true"})
    _refused(run("upgrade", "-g", RG, "-n", "web"), elsewhere,
             f"the Location header of the answer to POST {SET_PATH}/manualupgrade (HTTP 202)")


def test_a_subscriptions_next_link_elsewhere(arm: ArmServers, state: ArmState, elsewhere: RecordingServer) -> None:
    state.page_size = 1
    state.add_scale_set(SUB, RG, "web", capacity=1)
    state.add_subscription(SUB, display_name="Production")
    state.add_subscription("00000000-0000-0000-0000-0000000000bb", display_name="Staging")
    arm.arm_server.faults.add(method="GET", path_contains="/subscriptions", foreign_link=elsewhere.origin)
    _refused(run("status", "-g", RG, "-n", "web", "--subscription", "Staging"), elsewhere,
             "the nextLink of the answer to GET /subscriptions (HTTP 200)")


def test_a_redirect_elsewhere(arm: ArmServers, state: ArmState, elsewhere: RecordingServer) -> None:
    """Any other link: a 307 to another origin is refused too (azure-core would follow it)."""
    state.add_scale_set(SUB, RG, "web", capacity=1)
    arm.arm_server.faults.add(method="GET", path_contains="/web", status=307, body=b"",
                              headers={"Location": f"{elsewhere.origin}{SET_PATH}"})
    _refused(run("status", "-g", RG, "-n", "web"), elsewhere, f"the Location header of the answer to GET {SET_PATH}")


def test_the_same_origin_written_differently_is_the_same_origin() -> None:
    """Scheme and host compare case-insensitively and a default port is the same port; another
    port, scheme or host is another origin."""
    assert origin_of("HTTPS://Management.Azure.com/x") == origin_of("https://management.azure.com:443/y")
    guard = OriginGuard("http://127.0.0.1:8080")
    guard.check("GET", "http://127.0.0.1:8080/subscriptions?api-version=1")
    for other in ("http://127.0.0.1:8081/x", "https://127.0.0.1:8080/x", "http://localhost:8080/x"):
        with pytest.raises(Exception, match="refused to follow a link to"):
            guard.check("GET", other)


TRICKY = ["http://127.0.0.1:8080/a", "HTTP://127.0.0.1:8080/b", "http://127.0.0.1:80800/c", "http://127.0.0.1:8080@evil/x",
          "http://evil/http://127.0.0.1:8080/", "http://127.0.0.1:8080?x=/y", "http://127.0.0.1:8080#/z",
          "http://127.0.0.1:8080\\@evil/", "http://127.0.0.1:8080\t/x", "https://127.0.0.1:8080/", "http://127.0.0.1/",
          "//127.0.0.1:8080/x", "http://127.0.0.1:8080", "http://[::1]:8080/x", "http://127.0.0.1:8080:1/x",
          "http://[::1/x"]


@pytest.mark.parametrize("url", TRICKY)
def test_a_remembered_answer_is_the_answer_parsing_gives(url: str) -> None:
    """The guard remembers its answer per `scheme://netloc` as written: for each URL, asked twice
    (the second time from memory, after other URLs filled it), the answer is urlsplit's."""
    guard = OriginGuard("http://127.0.0.1:8080")
    expected = origin_of(url) == guard.origin
    for _ in range(2):
        for other in TRICKY:
            guard.allows(other)
        assert guard.allows(url) is expected
