"""The shared emulator HTTP machinery: faults, request log, error isolation."""

from __future__ import annotations

from typing import Iterator

import pytest
import requests
from helpers import poll_until

from vmss_terminate_sim.emulator.faults import FaultSpecError, parse_fault_spec
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response


class Echo:
    def handle(self, request: Request) -> Response:
        if request.path == "/boom":
            raise RuntimeError("bug")
        return Response.json(200, {"method": request.method, "path": request.path, "q": request.param("A")})


@pytest.fixture()
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer(Echo()) as srv:
        yield srv


def test_serves_on_loopback_and_logs(server: EmulatorServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    reply = requests.patch(f"{server.url}/x?a=1", json={"k": 1}, timeout=5)
    assert reply.json() == {"method": "PATCH", "path": "/x", "q": "1"}
    [entry] = server.log.find("PATCH", "/x")
    assert entry.status == 200 and entry.body == b'{"k": 1}'


def test_fault_is_consumed_in_order(server: EmulatorServer) -> None:
    server.faults.add(status=429, headers={"Retry-After": "2"}, method="GET", times=2)
    codes = [requests.get(f"{server.url}/y", timeout=5).status_code for _ in range(3)]
    assert codes == [429, 429, 200]
    assert server.faults.pending() == 0


def test_fault_matches_path_and_garbage(server: EmulatorServer) -> None:
    server.faults.add(garbage=True, path_contains="/g")
    assert requests.get(f"{server.url}/other", timeout=5).json()["path"] == "/other"
    with pytest.raises(ValueError):
        requests.get(f"{server.url}/g", timeout=5).json()


def test_app_exception_is_a_500_not_a_dropped_connection(server: EmulatorServer) -> None:
    assert requests.get(f"{server.url}/boom", timeout=5).status_code == 500


def test_wait_for_is_bounded(server: EmulatorServer) -> None:
    assert server.log.wait_for(lambda items: len(items) >= 1, timeout=0.05) is False
    requests.get(f"{server.url}/z", timeout=5)
    assert server.log.wait_for(lambda items: len(items) >= 1, timeout=5) is True


def test_suite_network_guard_refuses_non_loopback() -> None:
    """tests/conftest.py must stop any test from reaching IMDS's real address or Azure."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        with pytest.raises(ConnectionRefusedError, match="only loopback"):
            sock.connect(("169.254.169.254", 80))


def test_unlimited_fault_applies_until_cleared(server: EmulatorServer) -> None:
    server.faults.add(status=503, times=None)
    assert [requests.get(f"{server.url}/u", timeout=5).status_code for _ in range(3)] == [503, 503, 503]
    assert server.faults.pending() is None
    server.faults.clear()
    assert requests.get(f"{server.url}/u", timeout=5).status_code == 200


def test_faults_admin_route_adds_lists_and_clears_with_the_cli_fields(server: EmulatorServer) -> None:
    """Users testing hooks break a running emulator over HTTP, with the same fields as `--fault`."""
    added = requests.post(f"{server.url}/emulator/faults",
                          json={"status": 503, "retry-after": 1, "path": "/y", "times": 2}, timeout=5)
    assert added.status_code == 201 and added.json()["retry-after"] == "1"
    listed = requests.get(f"{server.url}/emulator/faults", timeout=5).json()["faults"]
    assert [(f["status"], f["times"]) for f in listed] == [(503, 2)]
    answers = [requests.get(f"{server.url}/y", timeout=5) for _ in range(3)]
    assert [a.status_code for a in answers] == [503, 503, 200]
    assert answers[0].headers["Retry-After"] == "1"

    requests.post(f"{server.url}/emulator/faults", json={"garbage": True, "times": "all"}, timeout=5)
    assert requests.get(f"{server.url}/z", timeout=5).text.startswith("<html>")
    assert requests.delete(f"{server.url}/emulator/faults", timeout=5).json() == {"faults": []}
    assert requests.get(f"{server.url}/z", timeout=5).json()["path"] == "/z"


@pytest.mark.parametrize("body", [{"status": 99}, {"nope": 1}, {"times": 3}, [], {"delay": "soon"}])
def test_faults_admin_route_refuses_bad_faults_with_400(server: EmulatorServer, body: object) -> None:
    reply = requests.post(f"{server.url}/emulator/faults", json=body, timeout=5)
    assert reply.status_code == 400 and reply.json()["error"]
    assert server.faults.queued() == []


@pytest.mark.parametrize("body", [{"stuck": True}, {"link-loop": True, "path": "/y"}, {"short-rows": 3}])
def test_an_emulator_that_ignores_answer_faults_refuses_them(server: EmulatorServer, body: object) -> None:
    """Only the ARM emulator acts on answer faults: elsewhere a 400 (and FaultSpecError from Python),
    never a queued fault that silently does nothing."""
    reply = requests.post(f"{server.url}/emulator/faults", json=body, timeout=5)
    assert reply.status_code == 400 and "only the ARM emulator" in reply.json()["error"]
    with pytest.raises(FaultSpecError, match="only the ARM emulator"):
        server.faults.add(stuck=True)
    assert server.faults.queued() == []
    with EmulatorServer(Echo(), answer_faults=True) as arm_like:
        assert requests.post(f"{arm_like.url}/emulator/faults", json=body, timeout=5).status_code == 201


def test_fault_spec_parses_the_documented_fields() -> None:
    fault = parse_fault_spec("status=429,retry-after=2,times=3,method=get,path=/metadata")
    assert (fault.status, fault.headers, fault.times, fault.method, fault.path_contains) == (
        429, {"Retry-After": "2"}, 3, "GET", "/metadata")
    assert parse_fault_spec("garbage,times=all").garbage and parse_fault_spec("garbage,times=all").times is None
    assert parse_fault_spec("delay=1.5").delay == 1.5 and parse_fault_spec("delay=1.5").times == 1
    for bad in ("status=600", "times=0,status=500", "status", "", "colour=red"):
        with pytest.raises(FaultSpecError):
            parse_fault_spec(bad)


def test_reset_ends_injected_delays_and_keeps_old_requests_out_of_the_new_scenario(server: EmulatorServer) -> None:
    """Shared servers: a delayed request its client gave up on must not reach the next test's app or log."""
    server.faults.add(delay=60, path_contains="/slow")
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(f"{server.url}/slow", timeout=0.3)
    assert poll_until(lambda: server.in_flight == 1, 5)  # the server still holds it, in the delay
    server.reset(Echo(), timeout=5)  # raises if the 60 s delay were not cut short
    assert server.in_flight == 0 and server.log.all() == []
    assert requests.get(f"{server.url}/next", timeout=5).status_code == 200
    assert [r.path for r in server.log.all()] == ["/next"]


def test_stop_hangs_up_keep_alive_connections() -> None:
    """Issue 12 #6: a stopped server (a deleted VM's IMDS) must not keep answering on a connection
    a client opened before, or the client never sees the outage."""
    import http.client

    server = EmulatorServer(Echo()).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", "/before")
        first = conn.getresponse()
        assert first.status == 200 and not first.will_close  # a keep-alive connection
        first.read()
        server.stop()
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.request("GET", "/after")
            conn.getresponse()
    finally:
        conn.close()
        server.stop()  # idempotent
    assert server.log.count("GET", "/after") == 0
