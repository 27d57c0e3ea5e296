"""Fixtures for the IMDS emulator tests: a ManualClock-driven placement group, servers on loopback
and a tiny proxy-free client (the tests talk real HTTP, as an agent would)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer, Response

T0 = 1_700_000_000.0


class Imds:
    """Requests against an emulator with IMDS conventions (Metadata header, api-version)."""

    def __init__(self) -> None:
        self.session = requests.Session()
        self.session.trust_env = False  # never an ambient proxy

    def get(self, server: EmulatorServer, path: str, params: Any = None,
            headers: Optional[Dict[str, str]] = None) -> requests.Response:
        merged = {"Metadata": "true"} if headers is None else headers
        return self.session.get(server.url + path, params=params, headers=merged, timeout=10,
                                allow_redirects=False)

    def events(self, server: EmulatorServer, version: str = "2019-01-01") -> Dict[str, Any]:
        reply = self.get(server, "/metadata/scheduledevents", {"api-version": version})
        assert reply.status_code == 200, reply.text
        return reply.json()

    def post(self, server: EmulatorServer, body: Any, version: str = "2019-01-01",
             headers: Optional[Dict[str, str]] = None) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) else None
        return self.session.post(
            server.url + "/metadata/scheduledevents", params={"api-version": version},
            headers={"Metadata": "true"} if headers is None else headers,
            json=None if data is not None else body, data=data, timeout=10, allow_redirects=False,
        )

    def approve(self, server: EmulatorServer, *event_ids: str) -> requests.Response:
        return self.post(server, {"StartRequests": [{"EventId": e} for e in event_ids]})

    def admin(self, method: str, server: EmulatorServer, path: str, **kwargs: Any) -> requests.Response:
        return self.session.request(method, server.url + "/emulator" + path, timeout=10, **kwargs)


@pytest.fixture()
def clock() -> ManualClock:
    return ManualClock(start=T0)


@pytest.fixture()
def group(clock: ManualClock) -> PlacementGroup:
    return PlacementGroup(clock=clock, started_ttl=60.0)


class _Idle:
    def handle(self, request: Any) -> Response:
        return Response.json(503, {"error": "no app"})


class ServerPool:
    """Loopback servers reused across tests: stopping one costs up to 0.5 s (the stdlib's shutdown
    poll), so each test swaps its own app into a pooled server instead of starting a new one."""

    def __init__(self) -> None:
        self.free: List[EmulatorServer] = []
        self.all: List[EmulatorServer] = []

    def take(self, app: Any) -> EmulatorServer:
        if not self.free:
            server = EmulatorServer(_Idle()).start()
            self.all.append(server)
            self.free.append(server)
        server = self.free.pop()
        server.reset(app)
        return server

    def give_back(self, server: EmulatorServer) -> None:
        server.reset(_Idle())
        self.free.append(server)

    def close(self) -> None:
        stoppers = [threading.Thread(target=s.stop) for s in self.all]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()


@pytest.fixture(scope="session")
def server_pool() -> Iterator[ServerPool]:
    pool = ServerPool()
    yield pool
    pool.close()


@pytest.fixture()
def serve(server_pool: ServerPool) -> Iterator[Callable[[Any], EmulatorServer]]:
    taken: List[EmulatorServer] = []

    def _serve(app: Any) -> EmulatorServer:
        server = server_pool.take(app)
        taken.append(server)
        return server

    yield _serve
    for server in taken:
        server_pool.give_back(server)


@pytest.fixture()
def vm(group: PlacementGroup, serve: Callable[[Any], EmulatorServer]) -> EmulatorServer:
    """myvmss_3 without a rate limit (tests that count requests make their own)."""
    return serve(ImdsEmulator(group, vm_name="myvmss_3", vmss_name="myvmss", rate_limit=None))


@pytest.fixture()
def imds() -> Iterator[Imds]:
    client = Imds()
    yield client
    client.session.close()
