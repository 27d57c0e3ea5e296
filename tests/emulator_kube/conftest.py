"""Fixtures for the Kubernetes API emulator: a state on a manual clock, the emulator serving it over
http (REST tests) or HTTPS with a test CA and a bearer token (kubectl tests), and a `Kubectl` runner
that keeps every bit of kubectl state (kubeconfig, discovery cache, HOME) in the test's tmp_path."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate.emulator.kube import KubeServers, KubeState, start_kube

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (CI has v1.32 at /usr/bin/kubectl)")


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
    """The module's http emulator (token `test-token`) serving this test's state, with an empty log."""
    _http_servers.reset(state)
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


@pytest.fixture(scope="session")
def tls() -> Tuple[ssl.SSLContext, bytes]:
    """A server context for 127.0.0.1 signed by a fresh test CA, and that CA's PEM."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context, ca.cert_pem.bytes()


class Kubectl:
    """Runs the real kubectl against one emulator with a kubeconfig, cache and HOME under tmp_path
    (no ~/.kube, no KUBECONFIG from the environment)."""

    def __init__(self, servers: KubeServers, tmp_path: Path) -> None:
        assert KUBECTL is not None
        self.kubeconfig = servers.write_kubeconfig(tmp_path / "kubeconfig")
        self._cache = tmp_path / "kube-cache"
        self._env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        self._env["HOME"] = str(tmp_path / "home")

    def run(self, *args: str, timeout: float = 60) -> "subprocess.CompletedProcess[str]":
        command: List[Any] = [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self._cache), *args]
        return subprocess.run(command, capture_output=True, text=True, env=self._env, timeout=timeout)

    def ok(self, *args: str, timeout: float = 60) -> str:
        result = self.run(*args, timeout=timeout)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout


@pytest.fixture
def kubectl_cluster(tls: Tuple[ssl.SSLContext, bytes], tmp_path: Path) -> Iterator[Tuple[KubeServers, Kubectl]]:
    """An HTTPS emulator (random bearer token, real clock: kubectl polls in real time) and kubectl for it."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (CI has v1.32 at /usr/bin/kubectl)")
    context, ca_pem = tls
    with start_kube(KubeState(), ssl_context=context, ca_pem=ca_pem) as servers:
        yield servers, Kubectl(servers, tmp_path)
