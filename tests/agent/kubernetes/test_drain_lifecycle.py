"""The node drain across an event's life, over real HTTP (IMDS and Kubernetes API emulators): an
event that drops out of one answer, one that leaves for good and comes back, a hook interrupted by a
restart, a cancelled Terminate followed by a new one, a Freeze. The rule in every case: our Terminate
is approved only after a drain that finished (or its deadline), never after a drain that was stopped."""

from __future__ import annotations

from typing import Any, List

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate_sim.emulator.kube import NODES, PODS

from ..conftest import Running
from .conftest import NODE, OTHER, TOKEN, VM, Cluster
from .test_drain import TAINT_KEY, on_approval, one_pod_held, workloads

ONLY_DAEMONS = [["etcd-static", "logs-x"]]  # what a drained node still runs: a DaemonSet pod, a mirror pod


def test_a_terminate_missing_from_one_answer_is_still_drained_before_its_approval(cluster: Cluster) -> None:
    workloads(cluster)  # the PDB lets one web pod go at a time: the drain takes a while
    at_approval = on_approval(cluster)
    agent = cluster.agent()
    not_before = cluster.clock.now() + 600
    eid = cluster.group.add_event("Terminate", [VM], not_before=not_before)
    flapped: List[bool] = []

    def back(decision: Decision) -> None:  # runs in the agent's thread, before its next poll
        if decision.kind == D.EVENT_GONE and decision.event_id == eid and not flapped:
            flapped.append(True)
            cluster.group.add_event("Terminate", [VM], not_before=not_before, event_id=eid)

    agent.subscribe(back)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        cluster.group.remove_event(eid)  # one answer without it ...
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    assert flapped
    kinds = running.decisions.kinds(eid)
    assert D.KUBE_UNCORDONED not in kinds  # one missing answer is not a cancellation
    assert kinds.index(D.EVENT_GONE) < kinds.index(D.KUBE_DRAINED) < kinds.index(D.APPROVAL_SENT)
    assert at_approval == ONLY_DAEMONS  # approved drained, not at once


def test_a_terminate_gone_for_good_is_uncordoned_and_drained_again_when_it_comes_back(cluster: Cluster) -> None:
    workloads(cluster, min_available=3)  # web-a and web-b are held by the PDB: the drain waits
    agent = cluster.agent()
    not_before = cluster.clock.now() + 600
    eid = cluster.group.add_event("Terminate", [VM], not_before=not_before)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        cluster.group.remove_event(eid)
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)  # gone for good: undone
        assert not cluster.node()["spec"].get("unschedulable")
        cluster.group.add_event("Terminate", [VM], not_before=not_before, event_id=eid)  # ... and back
        # the drain runs again from the start: cordoned again, evictions refused again by the PDB
        assert running.decisions.wait_for(lambda items: [d.kind for d in items if d.event_id == eid].count(
            D.KUBE_CORDONED) == 2, timeout=30)
        cordons = running.decisions.kinds(eid).count(D.KUBE_EVICTION_REFUSED)
        assert running.decisions.wait_for(lambda items: [d.kind for d in items if d.event_id == eid].count(
            D.KUBE_EVICTION_REFUSED) > cordons, timeout=30)
        kinds = running.decisions.kinds(eid)
        node = cluster.node()
    assert D.APPROVAL_SENT not in kinds and cluster.group.approvals == []
    assert node["spec"].get("unschedulable") is True
    assert TAINT_KEY in [t["key"] for t in node["spec"].get("taints") or []]
    gone = next(d for d in running.decisions.items if d.kind == D.HOOK_FAILED and d.event_id == eid)
    assert gone.data["outcome"] == "gone" and "every hook runs again" in gone.message


def test_a_hook_interrupted_by_a_restart_and_not_rerun_still_leaves_the_drain_before_the_approval(
        cluster: Cluster, tmp_path: Any) -> None:
    workloads(cluster)
    at_approval = on_approval(cluster)
    state_file = str(tmp_path / "state.json")
    hook = "/bin/sleep 1000"
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    first = cluster.agent(state_file=state_file, hooks=[hook], stop_grace=0.0)
    with Running(first) as running:  # stopped (as by a crash) while the user's hook runs
        assert running.decisions.wait_kind(D.HOOK_STARTED, eid, timeout=30)
    second = cluster.agent(state_file=state_file, hooks=[hook], rerun_interrupted=False)
    with Running(second) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    kinds = running.decisions.kinds(eid)
    assert D.HOOK_RERUN not in kinds  # the hook is not run again ...
    assert kinds.index(D.HOOK_FAILED) < kinds.index(D.KUBE_DRAINED) < kinds.index(D.APPROVAL_SENT)  # ... the drain is
    assert at_approval == ONLY_DAEMONS
    sent = next(d for d in running.decisions.items if d.kind == D.APPROVAL_SENT)
    assert sent.data["hooks_result"] == "failed"


def test_a_new_terminate_after_a_cancelled_one_keeps_the_node_cordoned(cluster: Cluster) -> None:
    workloads(cluster, min_available=3)
    agent = cluster.agent()
    not_before = cluster.clock.now() + 600
    first = cluster.group.add_event("Terminate", [VM], not_before=not_before)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, first, timeout=30)
        cluster.group.remove_event(first)  # the scale-in is cancelled ...
        second = cluster.group.add_event("Terminate", [VM], not_before=not_before + 60)  # ... a new one comes
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, first, timeout=30)
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, second, timeout=30)
        node = cluster.node()
        assert node["spec"].get("unschedulable") is True  # the first one's undo left the second's cordon
        assert TAINT_KEY in [t["key"] for t in node["spec"].get("taints") or []]
        handed = next(d for d in running.decisions.items if d.kind == D.KUBE_UNCORDONED and d.event_id == first)
        assert handed.data.get("heir") == second and "stays cordoned" in handed.message
        cordoned = next(d for d in running.decisions.items if d.kind == D.KUBE_CORDONED and d.event_id == second)
        assert "not by vmss-terminate" not in cordoned.message  # it was cordoned for the first event
        cluster.group.remove_event(second)  # the second is cancelled too: now the node is uncordoned
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, second, timeout=30)
    node = cluster.node()
    assert not node["spec"].get("unschedulable")
    assert TAINT_KEY not in [t["key"] for t in node["spec"].get("taints") or []]
    assert cluster.group.approvals == []


def test_a_cordon_left_for_an_event_no_longer_in_the_document_is_taken_over(cluster: Cluster) -> None:
    from vmss_terminate.pipeline.kubernetes.rules import CORDONED_BY

    # an agent before this one cordoned the node for an event that is gone (its undo never ran)
    cluster.state.patch(NODES, "", NODE, "application/merge-patch+json",
                        {"metadata": {"annotations": {CORDONED_BY: "old-event"}}, "spec": {"unschedulable": True}})
    one_pod_held(cluster)
    agent = cluster.agent()
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_EVICTION_REFUSED, eid, timeout=30)
        assert cluster.node()["metadata"]["annotations"][CORDONED_BY] == eid
        cordoned = next(d for d in running.decisions.items if d.kind == D.KUBE_CORDONED)
        assert cordoned.data["by_us"] is True and "already" not in cordoned.message
        cluster.group.remove_event(eid)
        assert running.decisions.wait_kind(D.KUBE_UNCORDONED, eid, timeout=30)
    assert not cluster.node()["spec"].get("unschedulable")  # taken over, so undone with ours


def test_a_freeze_never_drains_the_node(cluster: Cluster) -> None:
    workloads(cluster)
    agent = cluster.agent(hooks=["true"], hook_events=["Terminate", "Freeze"], approve_types=["Freeze"])
    eid = cluster.group.add_event("Freeze", [VM], not_before=cluster.clock.now() + 600)
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    kinds = running.decisions.kinds(eid)
    assert D.HOOK_FINISHED in kinds  # the user's hook ran for the Freeze it subscribed ...
    assert not [k for k in kinds if k.startswith("kube_")]  # ... the node drain did not
    assert not cluster.node()["spec"].get("unschedulable")
    assert cluster.state.evictions == []


def test_a_cordon_refused_with_409_every_time_fails_the_drain_instead_of_claiming_it(cluster: Cluster) -> None:
    cluster.state.add_pod("solo", NODE, grace=1)
    faults = cluster.kube.server.faults
    faults.add(status=409, times=None, method="PATCH", path_contains=f"/api/v1/nodes/{NODE}")
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    try:
        with Running(cluster.agent()) as running:
            assert running.decisions.wait_kind(D.HOOK_FAILED, eid, timeout=30)
    finally:
        faults.clear()
    kinds = running.decisions.kinds(eid)
    assert D.KUBE_CORDONED not in kinds  # never said "cordoned and tainted" without having done it
    failed = next(d for d in running.decisions.items if d.kind == D.HOOK_FAILED)
    assert "409" in failed.message and "not cordoned" in failed.message
    assert cluster.state.evictions == []  # no pod is evicted from a node that was not cordoned


def test_an_eviction_names_the_pod_by_uid_so_a_pod_recreated_under_its_name_is_not_evicted(
        cluster: Cluster) -> None:
    import requests

    from vmss_terminate.pipeline.kubernetes import rules

    old = cluster.state.add_pod("db-0", NODE, grace=1)
    body = rules.eviction(old)
    assert body["deleteOptions"]["preconditions"]["uid"] == old["metadata"]["uid"]
    cluster.state.delete(PODS, "default", "db-0", 0)  # gone; a StatefulSet makes it again ...
    cluster.state.add_pod("db-0", OTHER, grace=1)  # ... on another node, under the same name
    url = f"{cluster.kube.url}/api/v1/namespaces/default/pods/db-0/eviction"
    answer = requests.post(url, json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert answer.status_code == 409  # the API server's answer to a UID precondition that fails
    assert cluster.pods_on(OTHER) == ["db-0"]



def test_an_eviction_answered_409_counts_as_gone_not_as_refused(cluster: Cluster) -> None:
    cluster.state.add_pod("moved", NODE, grace=1)
    cluster.state.add_pod("solo", NODE, grace=1)
    faults = cluster.kube.server.faults
    faults.add(status=409, times=1, path_contains="/pods/moved/eviction")  # its UID is another pod's now
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 600)
    with Running(cluster.agent()) as running:
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=30)
    assert faults.pending() == 0
    drained = next(d for d in running.decisions.items if d.kind == D.KUBE_DRAINED)
    assert drained.data["not_evicted"] == [] and D.KUBE_EVICTION_FAILED not in running.decisions.kinds(eid)


def test_a_pod_list_refused_while_waiting_is_warned_about_once_a_minute_not_every_second(
        cluster: Cluster, caplog: Any) -> None:
    import logging

    cluster.state.add_pod("solo", NODE, grace=1)
    faults = cluster.kube.server.faults
    agent = cluster.agent(safety_margin=30)

    def refuse_lists(decision: Decision) -> None:  # once evicted, every pod list is refused (RBAC changed)
        if decision.kind == D.KUBE_EVICTED:
            faults.add(status=403, times=None, method="GET", path_contains="/api/v1/pods")

    agent.subscribe(refuse_lists)
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 150)
    try:
        with caplog.at_level(logging.WARNING, logger="vmss_terminate.pipeline.kubernetes.drain"):
            with Running(agent) as running:  # waits for 'solo' until the deadline (120 clock seconds on)
                assert running.decisions.wait_kind(D.KUBE_NOT_DRAINED, eid, timeout=30)
    finally:
        faults.clear()
    warned = [r for r in caplog.records if "waiting for evicted pods" in r.getMessage()]
    assert 1 <= len(warned) <= 3  # about 100 refused lists: said once, then once a minute


def test_the_deadline_during_a_pod_list_still_says_which_pods_were_left(cluster: Cluster) -> None:
    """The deadline that comes while a pod list is in flight ends the wait as one between lists
    does: kube_not_drained names the pod (under load, a list spanning the deadline said only 'hook
    failed: deadline' -- the wait's outcome depended on the machine's speed)."""
    cluster.state.add_pod("solo", NODE, grace=1)
    faults = cluster.kube.server.faults
    agent = cluster.agent(safety_margin=30)

    def hold_lists(decision: Decision) -> None:  # once evicted, every pod list hangs past the deadline
        if decision.kind == D.KUBE_EVICTED:
            faults.add(delay=3600, times=None, method="GET", path_contains="/api/v1/pods")

    agent.subscribe(hold_lists)
    eid = cluster.group.add_event("Terminate", [VM], not_before=cluster.clock.now() + 150)
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.KUBE_NOT_DRAINED, eid, timeout=60)
            not_drained = [d for d in running.decisions.items if d.kind == D.KUBE_NOT_DRAINED]
    finally:
        faults.clear()
    assert [d.data["still_terminating"] for d in not_drained] == [["default/solo"]]
