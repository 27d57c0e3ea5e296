"""Fixtures for the node drain over real HTTP: the IMDS emulator (events, instance metadata) and
the Kubernetes API emulator, on one scaled clock, and an agent run with --kubernetes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from vmss_terminate.agent import Agent, AgentConfig
from vmss_terminate.clock import ScaledClock
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.kube import KubeServers, KubeState, start_kube
from vmss_terminate_sim.emulator.server import EmulatorServer

VM = "myvmss_3"
NODE = "aks-pool-3"  # named unlike the VM: found by spec.providerID
OTHER = "aks-pool-1"
SPEED = 20.0  # clock seconds per real second: a 10 s grace period passes in 0.5 s
TOKEN = "drain-test-token"


@dataclass
class Cluster:
    """One scenario: the VM's IMDS, the cluster, the shared clock and a kubeconfig for the agent."""

    clock: ScaledClock
    group: PlacementGroup
    imds: ImdsEmulator
    imds_url: str
    imds_server: EmulatorServer
    kube: KubeServers
    state: KubeState
    kubeconfig: Path

    @property
    def provider_id(self) -> str:
        return "azure://" + self.imds.resource_id

    def agent(self, **overrides: Any) -> Agent:
        options = dict(imds_url=self.imds_url, state_file=":memory:", poll_interval=0.5, max_requests_per_second=200,
                       request_timeout=2.0, first_call_timeout=2.0, kill_grace=1.0, stop_grace=0.0,
                       kubernetes=True, kubeconfig=str(self.kubeconfig))
        options.update(overrides)
        return Agent(AgentConfig(**options), clock=self.clock)

    def pods_on(self, node: str) -> List[str]:
        return sorted(p["metadata"]["name"] for p in self.state.pods_on(node))

    def node(self, name: str = NODE) -> Any:
        from vmss_terminate_sim.emulator.kube import NODES

        return self.state.get(NODES, "", name)


@pytest.fixture(scope="session")
def _kube_imds() -> Iterator[EmulatorServer]:
    with EmulatorServer(ImdsEmulator(PlacementGroup(auto_start=False), vm_name=VM, rate_limit=None)) as server:
        yield server


@pytest.fixture(scope="session")
def _kube_api() -> Iterator[KubeServers]:
    with start_kube(KubeState(), token=TOKEN) as servers:
        yield servers


@pytest.fixture
def cluster(_kube_imds: EmulatorServer, _kube_api: KubeServers, tmp_path: Path) -> Iterator[Cluster]:
    """VM myvmss_3 is node aks-pool-3 (by providerID); aks-pool-1 takes the replacements."""
    clock = ScaledClock(speed=SPEED)
    group = PlacementGroup(clock=clock, auto_start=False)
    app = ImdsEmulator(group, vm_name=VM, vmss_name="myvmss", rate_limit=None)
    _kube_imds.reset(app)
    state = _kube_api.reset(KubeState(clock=clock))
    state.add_node(NODE, provider_id="azure://" + app.resource_id)
    state.add_node(OTHER)
    kubeconfig = _kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    yield Cluster(clock, group, app, _kube_imds.url, _kube_imds, _kube_api, state, kubeconfig)
    _kube_imds.reset()
    _kube_api.reset()
