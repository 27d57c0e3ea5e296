"""Fixtures for the Kubernetes API emulator: a state on a manual clock, the emulator serving it over
http (REST tests), and an HTTPS emulator with the real kubectl for it (`kube_helpers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Tuple

import pytest
import requests
from kube_helpers import Kubectl, serve_for_kubectl

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.kube import KubeServers, KubeState, start_kube


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(clock: ManualClock) -> KubeState:
    return KubeState(clock=clock)


@pytest.fixture(scope="module")
def _http_servers() -> Iterator[KubeServers]:
    with start_kube(KubeState(), token="test-token") as servers:
        yield servers


@pytest.fixture
def kube(_http_servers: KubeServers, state: KubeState) -> Iterator[KubeServers]:
    """The module's http emulator (token `test-token`) serving this test's state, with an empty log;
    its watches time out on the test's ManualClock (`clock`), not in real seconds."""
    _http_servers.reset(state)
    _http_servers.app.watch_clock = state.clock
    yield _http_servers


@pytest.fixture
def api(kube: KubeServers) -> Iterator[requests.Session]:
    """A session carrying the emulator's token; `api.base` is its URL."""
    session = requests.Session()
    session.trust_env = False
    session.headers["Authorization"] = f"Bearer {kube.token}"
    session.base = kube.url  # type: ignore[attr-defined]
    yield session
    session.close()


@pytest.fixture
def kubectl_cluster(tmp_path: Path) -> Iterator[Tuple[KubeServers, Kubectl]]:
    """An HTTPS emulator (random bearer token, real clock: kubectl polls in real time) and kubectl for it."""
    with serve_for_kubectl() as servers:
        yield servers, Kubectl(servers, tmp_path)
