"""The central handler's whole story (issue 25's done-when), no agent in any instance: a sandbox
Windows-typed scale set publishing to Resource Graph, its VMs nodes of the Kubernetes API emulator;
`vmss-terminate central run` as a process with the real azure-identity chain (the sandbox's env);
the real kubectl watching (`kubectl get nodes` and `get pods --watch -o json --output-watch-events`,
two processes streaming every change). A scale-in of 3: each removed VM gets its hook, its node
drained and its Run Command (RunPowerShellScript), then its event is acknowledged once through the
Maintenance RP, and every instance is deleted before its NotBefore. Meanwhile one Terminate event
lists the two VMs that stay: it is acknowledged once, after both their nodes were drained.

Every node runs two replicas of its own app under a PodDisruptionBudget `minAvailable: 1`: the
drain evicts a node's pods at once, so the second eviction is answered 429 until the first pod's
replacement is Ready on the cluster's one node of no scale set (`SPARE`) -- the cluster-side drain
must honour the budget and retry, and still finish before NotBefore. What kubectl streamed is the evidence: the order of changes in a watch is
the cluster's order (resourceVersion), and the resourceVersion read when each event was approved
places every cordon and eviction before its acknowledgement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest
from kube_helpers import KubectlWatch, needs_kubectl

from vmss_terminate.clock import ScaledClock, wait_until
from vmss_terminate.control.scaleset import ScaleSetClient
from vmss_terminate_sim.sandbox.agents import demo_hook_command
from vmss_terminate_sim.sandbox.environment import Sandbox, SandboxConfig
from vmss_terminate_sim.sandbox.kubernetes import SandboxCluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
SPEED = 5.0  # PT5M lasts 60 real seconds: room for a loaded machine
GRACE_S = 5  # the app pods' terminationGracePeriodSeconds (sandbox s): a pod terminates for 1 real s
MIN_AVAILABLE = 1
SPARE = "aks-system-0"  # a node of no scale set, first by name: the emulator schedules replacements there


def add_apps(cluster: SandboxCluster) -> Dict[str, str]:
    """On every node, two replicas of its own app (a ReplicaSet) and a PodDisruptionBudget
    `minAvailable: 1` over them; node -> app. Replacements land on the first schedulable node by
    name (a node the scale-in keeps)."""
    apps = {}
    for vm in cluster.sandbox.vm_names():
        node = cluster.node_of(vm)
        app = f"app-{node}"
        cluster.state.add_replicaset(app, 2, labels={"app": app})
        for slot in ("a", "b"):
            cluster.state.add_pod(f"{app}-{slot}", node, labels={"app": app}, owner=f"ReplicaSet/{app}",
                                  grace=GRACE_S)
        cluster.state.add_pdb(app, selector={"app": app}, min_available=MIN_AVAILABLE)
        apps[node] = app
    return apps


def version(change: Dict[str, Any]) -> int:
    return int(change["object"]["metadata"]["resourceVersion"])


def healthy(pod: Dict[str, Any]) -> bool:
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or [])
    return ready and not pod["metadata"].get("deletionTimestamp")


@needs_kubectl
@pytest.mark.skipif(os.name == "nt", reason="POSIX")
def test_windows_scale_in_of_three_is_drained_and_acknowledged_from_outside(tmp_path: Path) -> None:
    script = tmp_path / "drain.ps1"
    script.write_text("Write-Host draining\n")
    config = SandboxConfig(instances=5, timeout_minutes=5, speed=SPEED, windows=True, publish_events=True,
                           imds_rate_limit=None, delete_duration=5.0)  # a deletion lasts 1 real s, not 6
    with Sandbox(config, clock=ScaledClock(speed=SPEED)) as box:
        cluster = SandboxCluster(box).start()
        try:
            cluster.state.add_node(SPARE)
            apps = add_apps(cluster)
            nodes = {vm: cluster.node_of(vm) for vm in box.vm_names()}
            approved_at: Dict[str, int] = {}  # EventId -> the cluster's resourceVersion when it was approved
            approved = threading.Condition()

            def on_change(kind: str, event: Any) -> None:
                if kind == "approved":
                    with approved:
                        approved_at.setdefault(event.event_id, int(cluster.state.resource_version))
                        approved.notify_all()

            box.group.add_listener(on_change)
            env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
            env.update(box.env())
            env["HOME"] = str(tmp_path)
            handler = subprocess.Popen(  # nothing to do before the scale-in: it starts while kubectl does
                [sys.executable, "-m", "vmss_terminate", "central", "run", "--subscription", config.subscription,
                 "-g", config.resource_group, "--hook", demo_hook_command(), "--kubernetes", "--kubeconfig",
                 cluster.kubeconfig, "--run-command", str(script), "--poll-interval", "0.5",
                 "--state-file", str(tmp_path / "state.json")],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            node_watch = KubectlWatch(cluster.kubeconfig, tmp_path, "nodes")
            pod_watch = KubectlWatch(cluster.kubeconfig, tmp_path, "pods")
            try:  # both watches have listed what is there: every later change is streamed
                assert node_watch.wait_for(lambda c: len(c) >= len(nodes) + 1, 60), node_watch.changes
                assert pod_watch.wait_for(lambda c: len(c) >= 2 * len(nodes), 60), pod_watch.changes
                with ScaleSetClient(box.connection(), config.resource_group, config.name) as client:
                    client.patch(json.dumps({"sku": {"capacity": 2}}).encode())
                removed = [d.vm_name for d in box.scheduler.deletions()]
                assert len(removed) == 3
                stay = sorted(set(nodes) - set(removed))
                pair = box.group.add_event("Terminate", stay, not_before=box.clock.now() + 300)  # two VMs, one event
                assert box.scheduler.wait_deleted(removed, 180), [d.explain() for d in box.scheduler.deletions()]
                assert wait_until(approved, lambda: pair in approved_at, 120)
                gone = {nodes[vm] for vm in removed}
                assert node_watch.wait_for(  # the node deletions reached kubectl too
                    lambda c: gone <= {x["object"]["metadata"]["name"] for x in c if x["type"] == "DELETED"}, 60)
            finally:
                handler.terminate()
                log = handler.communicate(timeout=30)[0]
                node_watch.stop()
                pod_watch.stop()
        finally:
            cluster.stop()
        acks = [a for a in box.state.maintenance.acknowledgements if a.accepted]
        commands = {r.vm_name: r for r in box.state.run_commands.records}
        for deletion in box.scheduler.deletions():
            mine = [a for a in acks if a.event_id == deletion.event_id]
            assert len(mine) == 1, log  # acknowledged exactly once, through the Maintenance RP
            assert deletion.approved_by == "Microsoft.Maintenance"
            assert deletion.start_reason.startswith("approved"), log
            assert deletion.not_before is not None and deletion.started_at is not None
            assert deletion.started_at < deletion.not_before  # deleted before its NotBefore
            command = commands[deletion.vm_name]
            assert command.command_id == "RunPowerShellScript" and command.script == ["Write-Host draining"]
            assert command.at <= mine[0].at  # the Run Command came before the acknowledgement
        assert len([a for a in acks if a.event_id == pair]) == 1, log  # the event listing two VMs: once
        assert all(commands[vm].at <= next(a.at for a in acks if a.event_id == pair) for vm in stay), log
        assert len(acks) == 4 and box.state.maintenance.foreign_acknowledgements() == []
        assert log.count("hook#1") >= 5 and "acknowledged" in log

    # -- what kubectl streamed --------------------------------------------------------------------
    node_changes: List[Dict[str, Any]] = node_watch.changes
    pod_changes: List[Dict[str, Any]] = pod_watch.changes
    assert [c for c in node_changes if c["type"] == "ERROR"] == [] and [c for c in pod_changes if c["type"] == "ERROR"] == []
    cordoned = {c["object"]["metadata"]["name"] for c in node_changes
                if c["type"] == "MODIFIED" and c["object"]["spec"].get("unschedulable")}
    drained = {vm: str(d.event_id) for d in box.scheduler.deletions() for vm in [d.vm_name]}
    drained.update({vm: pair for vm in stay})
    assert cordoned == {nodes[vm] for vm in drained} and SPARE not in cordoned, log  # every listed VM's, no other
    assert {c["object"]["metadata"]["name"] for c in node_changes if c["type"] == "DELETED"} == gone
    for vm, event_id in drained.items():
        node, app = nodes[vm], apps[nodes[vm]]
        acknowledged = approved_at[event_id]
        of_node = [c for c in node_changes if c["object"]["metadata"]["name"] == node]
        cordon = next(c for c in of_node if c["object"]["spec"].get("unschedulable"))
        assert version(cordon) < acknowledged, log  # cordoned, then acknowledged (the pair: after both nodes)
        if node in gone:  # then deleted
            assert acknowledged < version(next(c for c in of_node if c["type"] == "DELETED")), log
        # both of the node's pods got their deletionTimestamp from an eviction, and left, before the
        # acknowledgement (none went with its node)
        for pod in (f"{app}-a", f"{app}-b"):
            seen = [c for c in pod_changes if c["object"]["metadata"]["name"] == pod]
            evicted = next(c for c in seen if c["object"]["metadata"].get("deletionTimestamp"))
            left = next(c for c in seen if c["type"] == "DELETED")
            assert version(evicted) <= version(left) < acknowledged, (pod, log)
            assert any(e.uid == evicted["object"]["metadata"]["uid"] and e.code == 200
                       for e in cluster.state.evictions), pod  # through the Eviction API, not a DELETE

    # the budgets held: replaying the pod stream, no app ever had fewer than minAvailable healthy pods,
    # and each removed node's app was at its edge (one pod down) while the other waited
    pods: Dict[str, Dict[str, Any]] = {}
    lowest: Dict[str, int] = {}
    listed = 2 * len(nodes)  # the first changes are the initial list, as ADDED
    for index, change in enumerate(pod_changes):
        obj = change["object"]
        if change["type"] == "DELETED":
            pods.pop(obj["metadata"]["name"], None)
        else:
            pods[obj["metadata"]["name"]] = obj
        if index + 1 < listed:
            continue
        for app in apps.values():
            count = sum(1 for p in pods.values() if p["metadata"]["labels"].get("app") == app and healthy(p))
            lowest[app] = min(lowest.get(app, count), count)
    assert all(count >= MIN_AVAILABLE for count in lowest.values()), lowest
    assert {app for app, count in lowest.items() if count == MIN_AVAILABLE} == set(apps.values()), lowest

    # the API server's answers: the second pod of each drained app was refused (429, its budget) and
    # retried until allowed
    for app in apps.values():
        refused = [e for e in cluster.state.evictions if e.code == 429 and e.budget == app]
        assert refused, (app, cluster.state.evictions)
        allowed = {e.uid for e in cluster.state.evictions if e.code == 200}
        assert {e.uid for e in refused} <= allowed
    assert "refused" in log  # the handler said it was held back by the budget
