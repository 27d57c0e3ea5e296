"""`agent run --kubernetes` over real HTTP: the agent against the IMDS emulator (its Terminate
event, its instance metadata) and the Kubernetes API emulator (nodes, pods, PDBs, evictions), on
one scaled clock. What kubectl drain users expect: cordon before the first eviction, DaemonSet and
mirror pods left alone, PDB 429s retried, approval only once the evicted pods are gone (or at the
deadline), the cordon undone when the scale-in is cancelled, a restart that continues the drain."""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List

import pytest

from vmss_terminate.agent.metrics import AgentMetrics
from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.kubernetes import credentials
from vmss_terminate.pipeline.kubernetes.rules import DEFAULT_TAINT
from vmss_terminate_sim.emulator.kube import KubeState, start_kube

from ..conftest import Running, run_cli
from .conftest import NODE, OTHER, VM, Cluster

TAINT_KEY = DEFAULT_TAINT.split(":")[0]


def workloads(cluster: Cluster, min_available: int = 2) -> None:
    """web: 3 replicas (two on the VM's node) under a PDB that lets one go at a time; a DaemonSet pod,
    a mirror pod and a bare emptyDir pod on the node too."""
    state = cluster.state
    state.add_replicaset("web", 3, labels={"app": "web"})
    for name, node in (("web-a", NODE), ("web-b", NODE), ("web-c", OTHER)):
        state.add_pod(name, node, labels={"app": "web"}, owner="ReplicaSet/web", grace=10)
    state.add_pdb("web", selector={"app": "web"}, min_available=min_available)
    state.add_daemonset("logs", namespace="kube-system")
    state.add_pod("logs-x", NODE, namespace="kube-system", owner="DaemonSet/logs", labels={"app": "logs"})
    state.add_pod("etcd-static", NODE, namespace="kube-system", mirror=True)
    state.add_pod("scratch", NODE, empty_dir=True, grace=10)


def one_pod_held(cluster: Cluster) -> None:
    """db-0 on the node, under a PodDisruptionBudget that lets none go: the drain waits."""
    cluster.state.add_replicaset("db", 1, labels={"app": "db"})
    cluster.state.add_pod("db-0", NODE, labels={"app": "db"}, owner="ReplicaSet/db", grace=10)
    cluster.state.add_pdb("db", selector={"app": "db"}, max_unavailable=0)


def on_approval(cluster: Cluster) -> List[List[str]]:
    """The pods on the node at the moment each approval POST arrives."""
    seen: List[List[str]] = []

    def listener(kind: str, event: Any) -> None:
        if kind == "approved":
            seen.append(cluster.pods_on(NODE))

    cluster.group.add_listener(listener)
    return seen


def requests_of(cluster: Cluster) -> List[str]:
    return [f"{r.method} {r.path}" for r in cluster.kube.server.log.all()]


def test_drain_cordons_first_leaves_daemonset_and_mirror_pods_retries_the_pdb_and_approves_after(
        cluster: Cluster) -> None:
    workloads(cluster)
    at_approval = on_approval(cluster)
    agent = cluster.agent()
    metrics = AgentMetrics(agent).attach()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    kinds = running.decisions.kinds(eid)
    # /readyz turned 503 before the drain began; the drain ended before the approval
    assert kinds.index(D.DRAIN_STARTED) < kinds.index(D.KUBE_CORDONED) < kinds.index(D.KUBE_DRAINED) \
        < kinds.index(D.APPROVAL_SENT)
    # found by providerID although the node is named otherwise
    node_line = next(d for d in running.decisions.items if d.kind == D.KUBE_NODE)
    assert node_line.data["node"] == NODE and "providerID" in node_line.message
    # cordon (and taint) before the first eviction
    sent = requests_of(cluster)
    first_eviction = next(i for i, r in enumerate(sent) if r.startswith("POST") and r.endswith("/eviction"))
    assert any(r == f"PATCH /api/v1/nodes/{NODE}" for r in sent[:first_eviction])
    node = cluster.node()
    assert node["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "effect": "NoSchedule"} in node["spec"]["taints"]
    # DaemonSet and mirror pods never evicted; the others were, web-b only after 429s from the PDB
    evicted = {(e.name, e.code) for e in cluster.state.evictions}
    assert not {name for name, _ in evicted} & {"logs-x", "etcd-static"}
    assert {("web-a", 200), ("web-b", 200), ("scratch", 200)} <= evicted
    held = [name for name, code in evicted if code == 429]
    assert held in (["web-a"], ["web-b"])  # the PDB held the second web pod back until the first was gone
    # at the approval only the DaemonSet and mirror pods were left on the node
    assert at_approval == [["etcd-static", "logs-x"]]
    assert sorted(r.name for r in cluster.state.removals) == ["scratch", "web-a", "web-b"]
    reasons = [e["reason"] for e in sorted(cluster.state.events(), key=lambda e: e["eventTime"])
               if e.get("regarding", {}).get("name") == NODE]
    assert reasons == ["TerminateNotice", "TerminateDrained"]
    notice = next(e for e in cluster.state.events() if e["reason"] == "TerminateNotice")
    assert eid in notice["note"] and "NotBefore" in notice["note"]
    text = metrics.render()
    assert "vmss_terminate_kubernetes_pods_evicted_total 3" in text
    refused = sum(1 for e in cluster.state.evictions if e.code == 429)
    assert f"vmss_terminate_kubernetes_evictions_refused_total {refused}" in text
    assert f'vmss_terminate_kubernetes_node_cordoned{{node="{NODE}"}} 1' in text
    assert "vmss_terminate_kubernetes_drain_seconds_count 1" in text


def test_a_pod_that_cannot_go_is_named_and_the_approval_comes_at_the_deadline(cluster: Cluster) -> None:
    cluster.state.add_replicaset("db", 1, labels={"app": "db"})
    cluster.state.add_pod("db-0", NODE, labels={"app": "db"}, owner="ReplicaSet/db", grace=10)
    cluster.state.add_pdb("db", selector={"app": "db"}, max_unavailable=0)  # zero voluntary disruptions
    # the deadline 30 clock s away as before, then 10 real seconds (200 clock s) for the approval to arrive
    # before NotBefore: a margin of 30 left a loaded machine 1.5 real s
    agent = cluster.agent(safety_margin=200)
    metrics = AgentMetrics(agent).attach()
    not_before = float(int(cluster.clock.now()) + 230)  # whole seconds: NotBefore is sent as RFC 1123
    eid = cluster.group.add_event("Terminate", [VM], not_before=not_before)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    approved = cluster.group.approvals[0].at
    assert not_before - 200 <= approved < not_before  # at the deadline, still before NotBefore
    stuck = next(d for d in running.decisions.items if d.kind == D.KUBE_NOT_DRAINED)
    assert stuck.data["not_evicted"] == ["default/db-0"] and "default/db-0" in stuck.message
    failed = next(d for d in running.decisions.items if d.kind == D.HOOK_FAILED)
    assert failed.data["hook"] == "kubernetes:drain" and failed.data["outcome"] == "deadline"
    assert all(e.code == 429 for e in cluster.state.evictions) and len(cluster.state.evictions) >= 2
    warning = [e for e in cluster.state.events() if e["reason"] == "TerminateDrainIncomplete"]
    assert warning and warning[0]["type"] == "Warning"
    assert "vmss_terminate_kubernetes_pods_not_drained_total 1" in metrics.render()


def test_a_cancelled_terminate_uncordons_what_this_agent_cordoned(cluster: Cluster) -> None:
    workloads(cluster, min_available=3)  # web-a and web-b are held by the PDB: the drain waits
    agent = cluster.agent()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        assert cluster.node()["spec"].get("unschedulable") is True
        cluster.group.remove_event(eid)  # the scale-in was cancelled
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
    node = cluster.node()
    assert not node["spec"].get("unschedulable")
    assert TAINT_KEY not in [t["key"] for t in node["spec"].get("taints") or []]
    assert cluster.group.approvals == []
    assert "TerminateCancelled" in [e["reason"] for e in cluster.state.events()]


def test_a_node_cordoned_by_an_admin_stays_cordoned_after_a_cancel(cluster: Cluster) -> None:
    from vmss_terminate_sim.emulator.kube import NODES

    cluster.state.patch(NODES, "", NODE, "application/merge-patch+json", {"spec": {"unschedulable": True}})
    one_pod_held(cluster)
    agent = cluster.agent()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        cordoned = next(d for d in running.decisions.items if d.kind == D.KUBE_CORDONED)
        assert "cordoned already" in cordoned.message
        cluster.group.remove_event(eid)
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
    node = cluster.node()
    assert node["spec"].get("unschedulable") is True  # the admin's cordon stays
    assert TAINT_KEY not in [t["key"] for t in node["spec"].get("taints") or []]  # our taint goes


def test_a_restart_in_the_middle_of_the_drain_continues_it(cluster: Cluster, tmp_path: Path) -> None:
    # The API server gets a clock of its own that only the test moves: while the first agent runs, the
    # first web pod's replacement never turns Ready, so the PDB holds the second back however long the
    # agent takes to stop (on the scaled clock the replacement was Ready 0.25 real s after the first
    # eviction, and a loaded machine let the first agent evict both before its stop landed).
    kube_clock = ManualClock()
    state = cluster.kube.reset(KubeState(clock=kube_clock))
    state.add_node(NODE, provider_id=cluster.provider_id)
    state.add_node(OTHER)
    cluster = replace(cluster, state=state)
    workloads(cluster)
    at_approval = on_approval(cluster)
    state_file = tmp_path / "state.json"
    # NotBefore far enough (90 real s at SPEED) that the deadline never decides this story
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 1800)
    first = cluster.agent(state_file=str(state_file))
    with Running(first) as running:  # stopped while web-b is held back by the PDB
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
    record = json.loads(state_file.read_text())["events"][eid]
    assert record["kube_node"] == NODE and record["kube_cordoned"] is True
    evicted_web = [key.split("/")[1] for key in record["kube_evicted"].values() if "/web-" in key]
    assert len(evicted_web) == 1  # the PDB let one web pod go; the other was refused
    first_web = evicted_web[0]
    held_web = ({"web-a", "web-b"} - {first_web}).pop()
    assert cluster.group.approvals == []
    evictions_before = len(cluster.state.evictions)
    restarted_at = cluster.clock.now()
    kube_clock.advance(60)  # the first pods' grace periods pass and the replacement turns Ready
    second = cluster.agent(state_file=str(state_file), rerun_interrupted=False)  # the drain resumes anyway
    # and the held pod, evicted now, is gone its grace period later
    second.subscribe(lambda d: kube_clock.advance(60) if d.kind == D.KUBE_EVICTED else None)
    with Running(second) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    assert D.HOOK_RERUN in running.decisions.kinds(eid)
    assert at_approval == [["etcd-static", "logs-x"]]
    drained = next(d for d in running.decisions.items if d.kind == D.KUBE_DRAINED)
    assert drained.data["seconds"] >= restarted_at - record["kube_drain_started"]  # counted from the first start
    # the second agent did not start over: no second TerminateNotice, no second eviction of the first pod
    assert [e["reason"] for e in cluster.state.events()].count("TerminateNotice") == 1
    again = [e.name for e in cluster.state.evictions[evictions_before:] if e.code == 200]
    assert first_web not in again and held_web in again


def test_no_node_for_this_vm_is_said_and_the_terminate_approved_as_on_hook_failure_says(cluster: Cluster) -> None:
    from vmss_terminate_sim.emulator.kube import NODES

    cluster.state.delete(NODES, "", NODE)
    # The own node is looked for until the deadline (NotBefore - 15 s margin): 105 clock seconds,
    # about 5 real seconds at SPEED each (600 took 29 of the 30 s allowed: a race on a busy machine).
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 120)
    with Running(cluster.agent()) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    missing = next(d for d in running.decisions.items if d.kind == D.KUBE_NODE_NOT_FOUND)
    assert "no Kubernetes node is this VM" in missing.message and "--node-name" in missing.message
    eid2 = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 120)
    with Running(cluster.agent(on_hook_failure="wait")) as running:
        assert running.decisions.wait_kind(D.APPROVAL_WITHHELD, eid2, timeout=30)
    assert [a.event_id for a in cluster.group.approvals] == [eid]


def test_the_drain_runs_after_the_hooks_and_even_after_a_failed_hook(cluster: Cluster) -> None:
    cluster.state.add_pod("solo", NODE, grace=1)
    order: List[str] = []
    agent = cluster.agent(node_name=NODE)
    lock = threading.Lock()

    def hook(event: Any, context: Any) -> None:
        with lock:
            order.append("hook" if not cluster.state.evictions else "hook-after-eviction")
        raise RuntimeError("deregistration failed")

    agent.on("Terminate", hook)
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    assert order == ["hook"]
    assert [(e.name, e.code) for e in cluster.state.evictions] == [("solo", 200)]
    node_line = next(d for d in running.decisions.items if d.kind == D.KUBE_NODE)
    assert "--node-name" in node_line.message


def test_evictions_carry_the_token_and_only_to_the_api_server(cluster: Cluster) -> None:
    cluster.state.add_pod("solo", NODE, grace=1)
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(cluster.agent()) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    headers: List[Dict[str, str]] = [{k.lower(): v for k, v in r.headers.items()}
                                     for r in cluster.kube.server.log.all()]
    assert headers and all(h.get("authorization") == f"Bearer {cluster.kube.token}" for h in headers)
    imds_auth = [r for r in cluster.imds_server.log.all() if "authorization" in {k.lower() for k in r.headers}]
    assert imds_auth == []


def test_agent_run_kubernetes_from_the_command_line(cluster: Cluster) -> None:
    """The console script's click-free path: `agent run --kubernetes --kubeconfig FILE --once` drains
    the node (found by providerID through IMDS), approves, exits 0."""
    cluster.state.add_pod("solo", NODE, grace=1)
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    done = run_cli("run", "--once", "--kubernetes", "--kubeconfig", str(cluster.kubeconfig), "--imds-url",
                   cluster.imds_url, "--state-file", ":memory:", "--log-format", "json", timeout=60)
    assert done.returncode == 0, done.stderr
    assert [a.event_id for a in cluster.group.approvals] == [eid]
    kinds = [json.loads(line).get("kind") for line in done.stderr.splitlines() if line.startswith("{")]
    assert kinds.index("kube_cordoned") < kinds.index("kube_drained") < kinds.index("approval_sent")
    assert cluster.node()["spec"]["unschedulable"] is True


def test_kubernetes_options_are_checked_before_anything_runs(cluster: Cluster, tmp_path: Path) -> None:
    for args, message in [
        (("--node-name", NODE), "error: --node-name applies to --kubernetes"),
        (("--kubernetes", "--taint", "nope"), "error: invalid --taint 'nope'"),
        (("--kubernetes", "--node-name", "Not_A_Node"), "error: invalid --node-name 'Not_A_Node'"),
        (("--kubernetes", "--kubeconfig", str(tmp_path / "missing")), "error: cannot read --kubeconfig"),
    ]:
        done = run_cli("run", "--imds-url", cluster.imds_url, "--state-file", ":memory:", *args, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith(message), (args, done.stderr)
    assert cluster.kube.server.log.all() == [] and cluster.imds_server.log.all() == []


def test_in_cluster_credentials_over_https_with_a_rotating_token(cluster: Cluster, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The DaemonSet way: KUBERNETES_SERVICE_HOST/PORT, the service-account token and CA from the
    (injected) service-account directory, NODE_NAME from the downward API; the kubelet rotates the
    token mid-drain and the agent's next requests carry the new one."""
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("first-token\n")
    authority.cert_pem.write_to_path(str(account / "ca.crt"))
    cluster.state.add_replicaset("db", 1, labels={"app": "db"})
    cluster.state.add_pod("db-0", NODE, labels={"app": "db"}, owner="ReplicaSet/db", grace=10)
    cluster.state.add_pdb("db", selector={"app": "db"}, max_unavailable=0)  # the drain keeps retrying
    with start_kube(cluster.state, ssl_context=context, token="first-token") as kube:
        monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", str(account))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(kube.server.port))
        monkeypatch.setenv("NODE_NAME", NODE)
        agent = cluster.agent(kubeconfig=None)
        eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
            kube.app.token = "second-token"  # the kubelet renewed the projected token
            (account / "token").write_text("second-token\n")
            rotated = len(kube.server.log.all())
            seen = len([d for d in running.decisions.items if d.kind == D.KUBE_EVICTION_REFUSED])
            assert running.decisions.wait_for(
                lambda items: len([d for d in items if d.kind == D.KUBE_EVICTION_REFUSED]) >= seen + 2, timeout=30)
            cluster.group.remove_event(eid)
            assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
        later = kube.server.log.all()[rotated + 1:]
        assert later and all(r.headers.get("Authorization") == "Bearer second-token" for r in later)
    node_line = next(d for d in running.decisions.items if d.kind == D.KUBE_NODE)
    assert "--node-name" in node_line.message  # NODE_NAME, as a DaemonSet passes it
    assert not cluster.node()["spec"].get("unschedulable")


def test_a_node_named_like_the_computer_name_is_found_and_readyz_is_503_while_it_drains(
        cluster: Cluster, _kube_imds: Any) -> None:
    """No providerID (a kubeadm node, say): the node named like IMDS osProfile.computerName in lower
    case is this VM. /readyz answers 503 from the moment the Terminate is seen, during the drain."""
    from vmss_terminate_sim.emulator.imds.app import ImdsEmulator
    from vmss_terminate_sim.emulator.kube import NODES

    cluster.state.delete(NODES, "", NODE)  # the node with this VM's providerID
    _kube_imds.reset(ImdsEmulator(cluster.group, vm_name=VM, vmss_name="myvmss", rate_limit=None,
                                  compute={"osProfile": {"computerName": "MYVMSS000003"}}))
    cluster.state.add_node("myvmss000003")
    cluster.state.add_replicaset("db", 1, labels={"app": "db"})
    cluster.state.add_pod("db-0", "myvmss000003", labels={"app": "db"}, owner="ReplicaSet/db", grace=10)
    cluster.state.add_pdb("db", selector={"app": "db"}, max_unavailable=0)
    agent = cluster.agent()
    metrics = AgentMetrics(agent).attach()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        ready, reason = metrics.readiness()
        assert not ready and eid in reason
        cluster.group.remove_event(eid)
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
        assert running.decisions.wait_kind(D.DRAIN_ENDED, eid, timeout=30)
        assert metrics.readiness()[0]
    node_line = next(d for d in running.decisions.items if d.kind == D.KUBE_NODE)
    assert node_line.data["node"] == "myvmss000003" and "computer name" in node_line.message
    assert 'vmss_terminate_kubernetes_node_cordoned{node="myvmss000003"} 0' in metrics.render()


def test_api_failures_are_retried_and_404_means_already_gone(cluster: Cluster) -> None:
    cluster.state.add_pod("flaky", NODE, grace=1)
    cluster.state.add_pod("vanished", NODE, grace=1)
    faults = cluster.kube.server.faults
    faults.add(status=503, times=2, path_contains="/pods/flaky/eviction")
    faults.add(status=404, times=1, path_contains="/pods/vanished/eviction")
    faults.add(status=500, times=1, path_contains="/api/v1/nodes/")
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(cluster.agent()) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    assert faults.pending() == 0
    drained = next(d for d in running.decisions.items if d.kind == D.KUBE_DRAINED)
    assert drained.data["evicted"] == 1 and drained.data["not_evicted"] == []  # 'vanished' counted as gone
    errors = [d.message for d in running.decisions.items if d.kind == D.KUBE_ERROR]
    assert any("flaky" in m and "503" in m for m in errors) and any("500" in m for m in errors)
    assert [e.name for e in cluster.state.evictions if e.code == 200] == ["flaky"]


def test_a_scale_in_cancelled_while_the_agent_was_down_is_undone_by_the_next_agent(
        cluster: Cluster, tmp_path: Path) -> None:
    """The journal says this agent cordoned the node; the Terminate left the document while no agent
    ran: the next agent uncordons it on its first poll."""
    workloads(cluster, min_available=3)
    state_file = tmp_path / "state.json"
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(cluster.agent(state_file=str(state_file))) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
    cluster.group.remove_event(eid)
    assert cluster.node()["spec"].get("unschedulable") is True
    with Running(cluster.agent(state_file=str(state_file))) as running:
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
    node = cluster.node()
    assert not node["spec"].get("unschedulable")
    assert TAINT_KEY not in [t["key"] for t in node["spec"].get("taints") or []]
    assert eid not in json.loads(state_file.read_text())["events"]


def test_an_agent_without_the_journal_knows_its_cordon_from_the_node(cluster: Cluster) -> None:
    """A DaemonSet pod replaced mid-drain starts with an empty journal: the node's annotation (the
    EventId the cordon was for) tells the new agent the cordon is its own, so a cancel still undoes it."""
    from vmss_terminate.pipeline.kubernetes.rules import CORDONED_BY

    workloads(cluster, min_available=3)
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(cluster.agent()) as running:  # state in memory: gone with the agent
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
    assert cluster.node()["metadata"]["annotations"][CORDONED_BY] == eid
    with Running(cluster.agent()) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        cordoned = next(d for d in running.decisions.items if d.kind == D.KUBE_CORDONED)
        assert cordoned.data["by_us"] is True and "already" not in cordoned.message
        cluster.group.remove_event(eid)
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
    node = cluster.node()
    assert not node["spec"].get("unschedulable") and CORDONED_BY not in (node["metadata"].get("annotations") or {})


def test_a_terminate_that_started_and_left_the_document_never_gets_its_node_uncordoned(cluster: Cluster) -> None:
    """Issue 27 item 5: someone approved it, Azure began the deletion, the event left the document:
    the VM is going away, so its node stays cordoned (docs/kubernetes.md)."""
    one_pod_held(cluster)
    agent = cluster.agent()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        cluster.group.start_event(eid)  # approved elsewhere: Azure begins
        assert running.decisions.wait_kind(D.EVENT_STARTED, eid, timeout=30)
        cluster.group.remove_event(eid)  # and the event leaves the document
        assert running.decisions.wait_for(lambda items: any(
            d.kind == D.HOOK_FAILED and d.data.get("outcome") == "gone" for d in items), timeout=30)
        polls = cluster.imds_server.log.count("GET")
        assert cluster.imds_server.log.wait_for(lambda r: sum(x.method == "GET" for x in r) >= polls + 15, 30)
    assert D.KUBE_UNCORDONED not in running.decisions.kinds(eid)
    node = cluster.node()
    assert node["spec"].get("unschedulable") is True
    assert TAINT_KEY in [t["key"] for t in node["spec"].get("taints") or []]
    assert "TerminateCancelled" not in [e["reason"] for e in cluster.state.events()]


def test_two_events_naming_this_vm_drain_its_node_once(cluster: Cluster) -> None:
    """Issue 27 item 7: an own Terminate and a shared one naming this VM: one drain of the node at a
    time, each pod evicted once (two concurrent drains evicted five pods twice)."""
    for name in ("a", "b", "c", "d", "e"):
        cluster.state.add_pod(f"job-{name}", NODE, grace=5)
    own = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    cluster.group.add_event("Terminate", [VM, "myvmss_9"], not_before=cluster.clock.now() + 600)
    agent = cluster.agent()
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, own, timeout=30)
        assert running.decisions.wait_for(lambda items: sum(
            d.kind == D.HOOK_FINISHED and d.data.get("hook") == "kubernetes:drain" for d in items) == 2, 30)
    accepted = [e.name for e in cluster.state.evictions if e.code == 200]
    assert sorted(accepted) == [f"job-{n}" for n in "abcde"]  # once each
    assert [a.event_id for a in cluster.group.approvals] == [own]  # the shared one is never approved
