"""Issue 27 items 4 and 8: `agent run --kubernetes` checks the cluster and finds its node at start-up.
A refused configuration is exit 2 with one line; a transient failure is said, makes /healthz 503
naming it, and is looked at again; a node that is not found when the Terminate comes is looked for
until the deadline, never approved at once. A FIFO as --kubeconfig is one line, not a hang."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmss_terminate.agent.metrics import AgentMetrics
from vmss_terminate.pipeline import decisions as D

from ..conftest import Running, run_cli
from .conftest import NODE, VM, Cluster


def _cli_args(cluster: Cluster, *extra: str) -> list:
    return ["run", "--kubernetes", "--kubeconfig", str(cluster.kubeconfig), "--imds-url", cluster.imds_url,
            "--state-file", ":memory:", *extra]


@pytest.mark.parametrize("status", [401, 403])
def test_a_cluster_refusing_the_node_read_is_exit_2_with_one_line(cluster: Cluster, status: int) -> None:
    cluster.kube.server.faults.add(status=status, times=None, path_contains="/api/v1/nodes")
    result = run_cli(*_cli_args(cluster))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"refused to list nodes: {status}" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_an_unavailable_cluster_makes_healthz_503_naming_it_and_is_looked_at_again(cluster: Cluster) -> None:
    cluster.kube.server.faults.add(status=503, times=None, path_contains="/api/v1/nodes")
    agent = cluster.agent()
    metrics = AgentMetrics(agent).attach()
    try:
        with Running(agent) as running:
            assert running.decisions.wait_for(lambda items: any(
                d.kind == D.KUBE_ERROR and d.event_id is None for d in items), 30)
            assert running.decisions.wait_kind(D.VM_NAME, timeout=30)
            healthy, why = metrics.health()
            assert not healthy and "--kubernetes" in why and "503" in why
            cluster.kube.server.faults.clear()  # the API server is back
            assert running.decisions.wait_for(lambda items: any(
                d.kind == D.KUBE_NODE and d.event_id is None for d in items), 30)
            assert metrics.health()[0]
    finally:
        cluster.kube.server.faults.clear()


def test_a_node_not_registered_when_the_terminate_comes_is_looked_for_not_approved_at_once(cluster: Cluster) -> None:
    from vmss_terminate_sim.emulator.kube import NODES

    cluster.state.delete(NODES, "", NODE)  # the kubelet has not registered the node (yet)
    agent = cluster.agent()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_NODE_NOT_FOUND, eid, timeout=30)
        polls = cluster.imds_server.log.count("GET")
        assert cluster.imds_server.log.wait_for(lambda r: sum(x.method == "GET" for x in r) >= polls + 10, 30)
        assert cluster.group.approvals == []  # not approved undrained 1.2 s after the event
        cluster.state.add_node(NODE, provider_id=cluster.provider_id)  # it registers
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    kinds = running.decisions.kinds(eid)
    assert kinds.index(D.KUBE_CORDONED) < kinds.index(D.APPROVAL_SENT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_as_kubeconfig_is_one_line_not_a_hang(cluster: Cluster, tmp_path: Path) -> None:
    fifo = tmp_path / "kubeconfig.fifo"
    os.mkfifo(fifo)
    result = run_cli("run", "--kubernetes", "--kubeconfig", str(fifo), "--imds-url", cluster.imds_url,
                     "--state-file", ":memory:", timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: cannot read --kubeconfig {fifo}: not a regular file (a FIFO, socket or device?)"


def test_a_redirect_from_the_api_server_at_start_up_is_exit_2_with_one_line(cluster: Cluster) -> None:
    cluster.kube.server.faults.add(status=307, times=None, path_contains="/api/v1/nodes",
                                   headers={"Location": "https://elsewhere.invalid/api/v1/nodes"})
    result = run_cli(*_cli_args(cluster))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "307 redirect" in lines[0] and "never followed" in lines[0], result.stderr
