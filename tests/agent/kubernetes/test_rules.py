"""The node drain's pure decisions (pipeline/kubernetes/rules.py): which node, which pods, patches."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.kubernetes import rules

RID = "/subscriptions/sub/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/3"


def node(name: str, provider_id: str = "", unschedulable: bool = False,
         taints: Optional[List[Dict[str, str]]] = None) -> Dict[str, Any]:
    spec: Dict[str, Any] = {"providerID": provider_id} if provider_id else {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints is not None:
        spec["taints"] = taints
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7"}, "spec": spec}


def pod(name: str, uid: str = "", owner: str = "", annotations: Optional[Dict[str, str]] = None,
        deleting: bool = False, namespace: str = "default") -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True, "uid": "o"}]
    if annotations:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n"}}


def test_provider_id_names_the_vm_case_insensitively() -> None:
    assert rules.provider_id_names("azure://" + RID.lower(), RID)
    assert rules.provider_id_names("azure://" + RID.replace("resourceGroups", "resourcegroups"), RID)
    assert not rules.provider_id_names("azure://" + RID[:-1] + "31", RID)
    assert not rules.provider_id_names("aws:///" + RID, RID)
    assert not rules.provider_id_names("", RID)


def test_match_node_prefers_provider_id_then_lower_case_computer_name() -> None:
    nodes = [node("pool000003"), node("k8s-node-3", "azure://" + RID)]
    assert rules.match_node(nodes, RID, "POOL000003") == ("k8s-node-3", f"spec.providerID names {RID}")
    found = rules.match_node([node("pool000003")], RID, "POOL000003")
    assert found is not None and found[0] == "pool000003"
    assert rules.match_node([node("other")], RID, "POOL000003") is None
    assert rules.match_node([node("other")], "", "") is None


def test_daemonset_and_mirror_pods_are_left_alone_and_emptydir_pods_evicted() -> None:
    emptydir = pod("cache")
    emptydir["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    pods = [pod("ds", owner="DaemonSet"), pod("static", annotations={rules.MIRROR_ANNOTATION: "abc"}),
            pod("web", owner="ReplicaSet"), pod("bare"), emptydir, pod("leaving", deleting=True),
            pod("again", uid="u-again")]
    plan = rules.plan_pods(pods, evicted={"u-again": "default/again"})
    assert [rules.pod_key(p) for p in plan.evict] == ["default/web", "default/bare", "default/cache"]
    assert plan.skipped == {"default/ds": "daemonset", "default/static": "mirror"}
    assert plan.wait == {"uid-leaving": "default/leaving", "u-again": "default/again"}


def test_gone_is_judged_by_uid_not_by_name() -> None:
    waiting = {"old-uid": "db/db-0"}
    assert rules.still_there(waiting, [pod("db-0", uid="new-uid", namespace="db")]) == {}
    assert rules.still_there(waiting, [pod("db-0", uid="old-uid", namespace="db")]) == waiting


def test_cordon_patch_adds_only_what_is_missing_and_carries_the_resource_version() -> None:
    taint = rules.parse_taint(rules.DEFAULT_TAINT)
    other = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    patch, cordons, taints = rules.cordon_patch(node("n", taints=[other]), taint, "E1")
    assert (cordons, taints) == (True, True)
    assert patch == {"metadata": {"resourceVersion": "7", "annotations": {rules.CORDONED_BY: "E1"}},
                     "spec": {"unschedulable": True, "taints": [other, taint.to_json()]}}
    patch, cordons, taints = rules.cordon_patch(node("n", unschedulable=True), taint, "E1")
    assert (cordons, taints) == (False, True) and patch is not None and "unschedulable" not in patch["spec"]
    assert "annotations" not in patch["metadata"]  # someone else's cordon is not marked ours
    done = node("n", unschedulable=True, taints=[taint.to_json()])
    assert rules.cordon_patch(done, taint, "E1") == (None, False, False)


def test_uncordon_patch_undoes_only_what_this_agent_did() -> None:
    taint = rules.parse_taint(rules.DEFAULT_TAINT)
    other = {"key": "gpu", "effect": "NoSchedule"}
    cordoned = node("n", unschedulable=True, taints=[other, taint.to_json()])
    cordoned["metadata"]["annotations"] = {rules.CORDONED_BY: "E1", "keep": "me"}
    assert rules.uncordon_patch(cordoned, taint, uncordon=True, untaint=True) == {
        "metadata": {"resourceVersion": "7", "annotations": {rules.CORDONED_BY: None}},
        "spec": {"unschedulable": None, "taints": [other]}}
    # cordoned by an admin before the drain: only the taint goes
    del cordoned["metadata"]["annotations"][rules.CORDONED_BY]
    assert rules.uncordon_patch(cordoned, taint, uncordon=False, untaint=True) == {
        "metadata": {"resourceVersion": "7"}, "spec": {"taints": [other]}}
    assert rules.uncordon_patch(node("n"), taint, uncordon=True, untaint=True) is None


def test_the_node_tells_a_new_agent_what_an_earlier_one_did_for_the_same_event() -> None:
    taint = rules.parse_taint(rules.DEFAULT_TAINT)
    marked = node("n", unschedulable=True, taints=[taint.to_json()])
    marked["metadata"]["annotations"] = {rules.CORDONED_BY: "E1"}
    assert rules.done_for(marked, taint, "E1") == (True, True)
    assert rules.done_for(marked, taint, "E2") == (False, True)  # a stale mark of another event: not ours
    assert rules.done_for(node("n", unschedulable=True), taint, "E1") == (False, False)  # an admin's cordon


@pytest.mark.parametrize("text, expected", [
    ("vmss-terminate/terminating:NoSchedule", ("vmss-terminate/terminating", "", "NoSchedule")),
    ("example.com/leaving=yes:NoExecute", ("example.com/leaving", "yes", "NoExecute")),
    ("simple:PreferNoSchedule", ("simple", "", "PreferNoSchedule")),
])
def test_taints_parse_as_kubectl_writes_them(text: str, expected: tuple) -> None:
    assert tuple(rules.parse_taint(text)) == expected
    assert str(rules.parse_taint(text)) == text


@pytest.mark.parametrize("text", ["nocolon", "key:Sometimes", ":NoSchedule", "bad key:NoSchedule",
                                  "k=has space:NoSchedule", "-k:NoSchedule"])
def test_bad_taints_are_bad_input(text: str) -> None:
    with pytest.raises(UsageError, match="invalid --taint"):
        rules.parse_taint(text)


def test_node_event_is_an_events_k8s_io_event_about_the_node() -> None:
    body = rules.node_event(node("n1"), "TerminateNotice", "x" * 2000, 1_700_000_000.5, "pool_3")
    assert body["apiVersion"] == "events.k8s.io/v1" and body["metadata"]["namespace"] == "default"
    assert body["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}
    assert body["eventTime"] == "2023-11-14T22:13:20.500000Z"
    assert len(body["note"]) == 1024 and body["type"] == "Normal" and body["reason"] == "TerminateNotice"


def test_a_node_named_like_the_computer_name_but_with_another_vms_provider_id_is_not_this_vm() -> None:
    other_vm = "azure://" + RID[:-1] + "4"
    assert rules.match_node([node("pool000003", other_vm)], RID, "POOL000003") is None
    found = rules.match_node([node("pool000003", "azure://" + RID.upper())], RID, "POOL000003")
    assert found is not None and found[0] == "pool000003"  # the providerID names this VM (any case)
    assert rules.match_node([node("pool000003", other_vm), node("pool000003")], RID, "POOL000003") == (
        "pool000003", "named like the computer name POOL000003")  # only the one without a providerID


def test_a_cordon_left_for_another_event_is_named_and_taken_over_by_its_annotation_only() -> None:
    cordoned = node("n", unschedulable=True)
    cordoned["metadata"]["annotations"] = {rules.CORDONED_BY: "old"}
    assert rules.cordoned_for(cordoned) == "old"
    assert rules.cordoned_for(node("n")) == ""  # not cordoned: nobody's
    assert rules.take_over_patch(cordoned, "new") == {
        "metadata": {"resourceVersion": "7", "annotations": {rules.CORDONED_BY: "new"}}}
