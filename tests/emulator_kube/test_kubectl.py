"""The real kubectl (v1.32) against the emulator over HTTPS with a bearer token: get, cordon,
uncordon and drain (evictions, PodDisruptionBudgets, DaemonSet owners, mirror pods) succeed, and
the emulator's state shows what kubectl did."""

from __future__ import annotations

from typing import Tuple

import pytest
from kube_helpers import Kubectl, needs_kubectl

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.kube import NEW_EVENTS, NODES, PODS, KubeServers
from vmss_terminate_sim.emulator.kube.app import WATCH_DEFAULT

pytestmark = needs_kubectl
Cluster = Tuple[KubeServers, Kubectl]


def test_get_nodes_prints_the_table_kubectl_prints_for_a_cluster(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    kube.state.add_node("vmss000001", unschedulable=True)
    lines = kubectl.ok("get", "nodes").splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert lines[1].split()[:3] == ["vmss000000", "Ready", "<none>"]
    assert lines[2].split()[:2] == ["vmss000001", "Ready,SchedulingDisabled"]
    assert all(r.headers.get("Authorization") == f"Bearer {kube.token}" for r in kube.server.log.all()
               if r.path != "/version")


def test_kubectl_without_the_token_is_unauthorized(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    kube.app.token = "another-token"
    result = kubectl.run("get", "nodes")
    assert result.returncode == 1
    assert "You must be logged in to the server" in result.stderr


def test_cordon_and_uncordon_patch_spec_unschedulable(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    assert kubectl.ok("cordon", "vmss000000").strip() == "node/vmss000000 cordoned"
    assert kube.state.get(NODES, "", "vmss000000")["spec"]["unschedulable"] is True
    patches = kube.server.log.find("PATCH", "/api/v1/nodes/vmss000000")
    assert [p.headers["Content-Type"] for p in patches] == ["application/strategic-merge-patch+json"]
    assert kubectl.ok("cordon", "vmss000000").strip() == "node/vmss000000 already cordoned"
    assert kubectl.ok("uncordon", "vmss000000").strip() == "node/vmss000000 uncordoned"
    assert "unschedulable" not in kube.state.get(NODES, "", "vmss000000")["spec"]


def test_cordon_of_an_unknown_node_fails_with_not_found(kubectl_cluster: Cluster) -> None:
    _, kubectl = kubectl_cluster
    result = kubectl.run("cordon", "nope")
    assert result.returncode == 1
    assert 'nodes "nope" not found' in result.stderr


def test_drain_evicts_everything_but_daemonset_and_mirror_pods(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    state = kube.state
    state.add_node("vmss000000")
    state.add_node("vmss000001")
    state.add_replicaset("api", 2, labels={"app": "api"})
    state.add_pod("api-1", "vmss000000", labels={"app": "api"}, owner="ReplicaSet/api", grace=0)
    state.add_pod("api-2", "vmss000000", labels={"app": "api"}, owner="ReplicaSet/api", grace=0, empty_dir=True)
    state.add_daemonset("log-agent", namespace="kube-system")
    state.add_pod("log-agent-1", "vmss000000", namespace="kube-system", owner="DaemonSet/log-agent")
    state.add_pod("kube-proxy-vmss000000", "vmss000000", namespace="kube-system", mirror=True)
    state.add_pod("other", "vmss000001", labels={"app": "api"}, owner="ReplicaSet/api")

    result = kubectl.run("drain", "vmss000000", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "node/vmss000000 drained" in result.stdout
    assert "ignoring DaemonSet-managed Pods: kube-system/log-agent-1" in result.stderr
    assert sorted(e.name for e in state.evictions) == ["api-1", "api-2"]
    assert {p["metadata"]["name"] for p in state.pods_on("vmss000000")} == {"log-agent-1", "kube-proxy-vmss000000"}
    assert state.get(NODES, "", "vmss000000")["spec"]["unschedulable"] is True
    # the ReplicaSet's replacements went to the node that can take them
    assert len([p for p in state.pods_on("vmss000001") if p["metadata"]["name"].startswith("api-")]) == 2


def test_drain_refuses_daemonset_pods_without_ignore_daemonsets(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    kube.state.add_daemonset("log-agent", namespace="kube-system")
    kube.state.add_pod("log-agent-1", "vmss000000", namespace="kube-system", owner="DaemonSet/log-agent")
    result = kubectl.run("drain", "vmss000000", "--timeout=30s")
    assert result.returncode == 1
    assert "cannot delete DaemonSet-managed Pods" in result.stderr
    assert kube.state.evictions == []


@pytest.mark.slow  # kubectl retries a refused eviction after 5 real seconds
def test_a_pdb_holds_one_pod_back_until_the_other_is_gone(kubectl_cluster: Cluster) -> None:
    """maxUnavailable 1 over two pods on the node: the second eviction is refused (429) while the
    first pod's replacement (on the other node at once) starts; once it is Ready (5 s, after the
    first pod's 1 s grace period), kubectl's retry succeeds."""
    kube, kubectl = kubectl_cluster
    state = kube.state
    state.add_node("vmss000000")
    state.add_node("vmss000001")
    state.add_replicaset("web", 2, labels={"app": "web"})
    for name in ("web-1", "web-2"):
        state.add_pod(name, "vmss000000", labels={"app": "web"}, owner="ReplicaSet/web", grace=1)
    state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)

    result = kubectl.run("drain", "vmss000000", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Cannot evict pod as it would violate the pod's disruption budget." in result.stderr
    refused = [e for e in state.evictions if e.code == 429]
    allowed = [e for e in state.evictions if e.code == 200]
    assert refused and {e.budget for e in refused} == {"web"}
    assert sorted(e.name for e in allowed) == ["web-1", "web-2"]
    first, second = allowed
    assert refused[0].name == second.name != first.name
    gone = next(r for r in state.removals if r.name == first.name)
    assert gone.at <= second.at  # the held-back pod left only after the first one was gone
    assert state.pods_on("vmss000000") == []


@pytest.mark.parametrize("args", [("get", "pods", "-A", "-o", "wide"), ("get", "pdb", "-n", "default"),
                                  ("get", "daemonsets", "-A"), ("get", "node", "vmss000000", "-o", "json")])
def test_kubectl_get_reads_every_served_kind(kubectl_cluster: Cluster, args: Tuple[str, ...]) -> None:
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    kube.state.add_pod("web-1", "vmss000000", labels={"app": "web"})
    kube.state.add_pdb("web", selector={"app": "web"}, min_available=1)
    kube.state.add_daemonset("log-agent", namespace="kube-system")
    out = kubectl.ok(*args)
    assert out.strip()


def test_pods_listed_by_node_with_a_field_selector(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    for node in ("a", "b"):
        kube.state.add_node(node)
        kube.state.add_pod(f"pod-{node}", node)
    out = kubectl.ok("get", "pods", "-A", "--field-selector", "spec.nodeName=b", "-o", "name")
    assert out.split() == ["pod/pod-b"]
    assert kube.state.get(PODS, "default", "pod-a")


def test_get_events_shows_the_events_k8s_io_events_of_a_node(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    node = kube.state.add_node("vmss000000")
    kube.state.create(NEW_EVENTS, "default", {
        "metadata": {"generateName": "vmss000000."}, "eventTime": "2026-11-24T07:00:00.000000Z",
        "reportingController": "vmss-terminate", "reportingInstance": "vmss-terminate-vmss000000",
        "action": "Drain", "reason": "TerminateNotice", "type": "Normal", "note": "draining before Terminate",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": "vmss000000", "uid": node["metadata"]["uid"]}})
    lines = kubectl.ok("get", "events", "-n", "default").splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split()[1:] == ["Normal", "TerminateNotice", "node/vmss000000", "draining", "before", "Terminate"]
    described = kubectl.ok("describe", "node", "vmss000000")
    assert "TerminateNotice" in described.split("Events:")[1]


@pytest.mark.slow  # two pods' real 1 s grace periods
def test_delete_and_wait_watch_until_the_pod_is_gone(kubectl_cluster: Cluster) -> None:
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    kube.state.add_pod("web-1", "vmss000000", grace=1)
    kube.state.add_pod("web-2", "vmss000000", grace=1)
    result = kubectl.run("delete", "pod", "web-1", "--timeout=20s")
    assert (result.returncode, result.stdout.strip()) == (0, 'pod "web-1" deleted'), result.stderr
    assert "Unhandled Error" not in result.stderr
    assert [r.name for r in kube.state.removals] == ["web-1"]
    kubectl.ok("delete", "pod", "web-2", "--wait=false")
    kubectl.ok("wait", "--for=delete", "pod/web-2", "--timeout=20s")
    assert kube.state.find(PODS, "default", "web-2") is None


def test_drain_without_eviction_deletes_with_the_grace_period_given(kubectl_cluster: Cluster) -> None:
    """--disable-eviction DELETEs through kubectl's typed client, whose DeleteOptions are protobuf:
    the emulator reads the grace period from them (the pod's own 600 s would outlast --timeout)."""
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    kube.state.add_pod("web-1", "vmss000000", owner="ReplicaSet/web", grace=600)
    kube.state.add_pdb("web", selector={}, min_available=1)  # bypassed: no eviction, no budget
    result = kubectl.run("drain", "vmss000000", "--disable-eviction", "--grace-period=0", "--timeout=20s")
    assert result.returncode == 0, result.stderr
    assert kube.state.evictions == [] and [r.name for r in kube.state.removals] == ["web-1"]
    deletes = kube.server.log.find("DELETE", "/pods/web-1")
    assert [d.headers["Content-Type"] for d in deletes] == ["application/vnd.kubernetes.protobuf"]


def _watches(kube: KubeServers) -> int:
    return sum(1 for r in kube.server.log.all() if r.query.get("watch") == ["true"])


def test_get_w_streams_each_change_on_one_watch_that_stays_open_until_its_timeout(kubectl_cluster: Cluster) -> None:
    """Issue 27 item 11: `kubectl get -w` ended at once (the watch answer ended after ~1 s and
    kubectl get -w exits with its watch). Now one watch request carries every change, as rows under
    one header, and stays open until its timeout -- here on a ManualClock: 299 of its 300 s pass
    with kubectl still watching on the same request; at 300 s the watch ends and kubectl with it
    (exit 0), as against an API server's request timeout."""
    kube, kubectl = kubectl_cluster
    watch_clock = ManualClock()
    kube.app.watch_clock = watch_clock
    kube.state.add_node("vmss000000")
    with kubectl.start("get", "nodes", "-w") as out:
        assert (out.line() or "").split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        assert (out.line() or "").split()[:2] == ["vmss000000", "Ready"]
        assert kube.server.wait_streams(1, 30)  # its watch is open (kubectl lists, then watches)
        watch_clock.advance(WATCH_DEFAULT - 1)
        kube.state.patch(NODES, "", "vmss000000", "application/merge-patch+json", {"spec": {"unschedulable": True}})
        assert (out.line() or "").split()[:2] == ["vmss000000", "Ready,SchedulingDisabled"]
        kube.state.add_node("vmss000001")
        assert (out.line() or "").split()[:2] == ["vmss000001", "Ready"]  # a row, no second header
        assert (_watches(kube), kube.server.open_streams, out.process.poll()) == (1, 1, None)
        watch_clock.advance(1)
        assert out.line() is None and out.process.wait(30) == 0
    assert _watches(kube) == 1 and kube.server.wait_streams(0, 10)


def test_a_watch_kubectl_hangs_up_on_is_released_at_once(kubectl_cluster: Cluster) -> None:
    """Issue 27 item 11: a watch whose client went away held its thread and socket until its timeout
    (300 s). The emulator sees the hang-up (a TLS close) and ends the watch at once."""
    kube, kubectl = kubectl_cluster
    kube.state.add_node("vmss000000")
    with kubectl.start("get", "nodes", "-w") as out:
        assert (out.line() or "").startswith("NAME")
        assert kube.server.wait_streams(1, 30)
        out.process.kill()  # no goodbye beyond what the kernel sends
    assert kube.server.wait_streams(0, 10) and kube.server.wait_connections(0, 10)
