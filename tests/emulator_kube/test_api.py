"""The emulator's REST API over real HTTP: Status bodies, selectors, patches, resource versions, the
Eviction subresource's PodDisruptionBudget arithmetic and the pod life cycle on a manual clock."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any, Dict, List, Optional

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.kube import NEW_EVENTS, NODES, PODS, KubeServers, KubeState, disruption, start_kube
from vmss_terminate_sim.emulator.kube.app import WATCH_DEFAULT
from vmss_terminate_sim.emulator.kube.state import POD_START_SECONDS

Json = Dict[str, Any]


def _url(api: requests.Session, path: str) -> str:
    return api.base + path  # type: ignore[attr-defined]


def _evict(api: requests.Session, name: str, namespace: str = "default", **options: Any) -> requests.Response:
    body: Json = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    if options:
        body["deleteOptions"] = options
    return api.post(_url(api, f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"), json=body, timeout=5)


def _web(state: KubeState, replicas: int = 3, node: str = "n1", grace: int = 30) -> None:
    state.add_node(node)
    state.add_replicaset("web", replicas, labels={"app": "web"})
    for index in range(replicas):
        state.add_pod(f"web-{index}", node, labels={"app": "web"}, owner="ReplicaSet/web", grace=grace)


def test_unknown_pod_is_a_not_found_status(api: requests.Session) -> None:
    answer = api.get(_url(api, "/api/v1/namespaces/default/pods/nope"), timeout=5)
    assert answer.status_code == 404
    assert answer.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": 'pods "nope" not found', "reason": "NotFound",
                             "details": {"name": "nope", "kind": "pods"}, "code": 404}


def test_a_request_without_the_token_is_unauthorized(kube: KubeServers) -> None:
    answer = requests.get(kube.url + "/api/v1/nodes", timeout=5)
    assert answer.status_code == 401
    assert answer.json()["reason"] == "Unauthorized"
    assert requests.get(kube.url + "/version", timeout=5).json()["gitVersion"] == "v1.32.0"


def test_discovery_names_the_eviction_subresource_as_policy_v1(api: requests.Session) -> None:
    resources = api.get(_url(api, "/api/v1"), timeout=5).json()["resources"]
    eviction = next(r for r in resources if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"], eviction["verbs"]) == \
        ("policy", "v1", "Eviction", ["create"])
    groups = {g["name"] for g in api.get(_url(api, "/apis"), timeout=5).json()["groups"]}
    assert {"apps", "policy", "events.k8s.io", "rbac.authorization.k8s.io"} <= groups


def test_lists_filter_by_field_and_label_selectors(api: requests.Session, state: KubeState) -> None:
    for node in ("n1", "n2"):
        state.add_node(node)
    state.add_pod("a", "n1", labels={"app": "web", "tier": "front"})
    state.add_pod("b", "n1", labels={"app": "db"})
    state.add_pod("c", "n2", labels={"app": "web"})

    def names(**params: str) -> list:
        answer = api.get(_url(api, "/api/v1/pods"), params=params, timeout=5)
        assert answer.status_code == 200, answer.text
        assert answer.json()["kind"] == "PodList"
        return [item["metadata"]["name"] for item in answer.json()["items"]]

    assert names(fieldSelector="spec.nodeName=n1") == ["a", "b"]
    assert names(fieldSelector="spec.nodeName!=n1") == ["c"]
    assert names(labelSelector="app=web") == ["a", "c"]
    assert names(labelSelector="app in (web,db),!tier") == ["b", "c"]
    assert names(fieldSelector="spec.nodeName=n1", labelSelector="app=web") == ["a"]
    bad = api.get(_url(api, "/api/v1/pods"), params={"fieldSelector": "spec.color=red"}, timeout=5)
    assert (bad.status_code, bad.json()["reason"]) == (400, "BadRequest")
    unschedulable = api.get(_url(api, "/api/v1/nodes"), params={"fieldSelector": "spec.unschedulable=false"}, timeout=5)
    assert [n["metadata"]["name"] for n in unschedulable.json()["items"]] == ["n1", "n2"]


def test_list_pages_with_limit_and_continue(api: requests.Session, state: KubeState) -> None:
    for index in range(5):
        state.add_node(f"n{index}")
    first = api.get(_url(api, "/api/v1/nodes"), params={"limit": "2"}, timeout=5).json()
    assert [n["metadata"]["name"] for n in first["items"]] == ["n0", "n1"]
    rest = api.get(_url(api, "/api/v1/nodes"), params={"limit": "10", "continue": first["metadata"]["continue"]},
                   timeout=5).json()
    assert [n["metadata"]["name"] for n in rest["items"]] == ["n2", "n3", "n4"]
    assert "continue" not in rest["metadata"]


@pytest.mark.parametrize("content_type, patch", [
    ("application/strategic-merge-patch+json", {"spec": {"unschedulable": True, "taints": [
        {"key": "vmss-terminate/terminating", "value": "true", "effect": "NoSchedule"}]}}),
    ("application/merge-patch+json", {"spec": {"unschedulable": True, "taints": [
        {"key": "vmss-terminate/terminating", "value": "true", "effect": "NoSchedule"}]}}),
    ("application/json-patch+json", [{"op": "add", "path": "/spec/unschedulable", "value": True},
                                     {"op": "add", "path": "/spec/taints", "value": [
                                         {"key": "vmss-terminate/terminating", "value": "true",
                                          "effect": "NoSchedule"}]}]),
])
def test_node_patches_cordon_and_taint(api: requests.Session, state: KubeState, content_type: str, patch: Any) -> None:
    before = state.add_node("n1")
    answer = api.patch(_url(api, "/api/v1/nodes/n1"), json=patch, headers={"Content-Type": content_type}, timeout=5)
    assert answer.status_code == 200, answer.text
    node = answer.json()
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [{"key": "vmss-terminate/terminating", "value": "true", "effect": "NoSchedule"}]
    assert int(node["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert node["metadata"]["uid"] == before["metadata"]["uid"]
    assert node["status"] == before["status"]  # the main resource never changes status


def test_strategic_merge_null_removes_and_a_bad_taint_is_invalid(api: requests.Session, state: KubeState) -> None:
    state.add_node("n1", unschedulable=True)
    smp = {"Content-Type": "application/strategic-merge-patch+json"}
    answer = api.patch(_url(api, "/api/v1/nodes/n1"), json={"spec": {"unschedulable": None}}, headers=smp, timeout=5)
    assert "unschedulable" not in answer.json()["spec"]
    bad = api.patch(_url(api, "/api/v1/nodes/n1"), json={"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}},
                    headers=smp, timeout=5)
    assert (bad.status_code, bad.json()["reason"]) == (422, "Invalid")
    apply = api.patch(_url(api, "/api/v1/nodes/n1"), data="spec: {}", timeout=5,
                      headers={"Content-Type": "application/apply-patch+yaml"})
    assert apply.status_code == 415


def test_put_with_a_stale_resource_version_conflicts(api: requests.Session, state: KubeState) -> None:
    node = state.add_node("n1")
    state.patch(NODES, "", "n1", "application/merge-patch+json", {"metadata": {"labels": {"x": "y"}}})
    node["spec"]["unschedulable"] = True
    answer = api.put(_url(api, "/api/v1/nodes/n1"), json=node, timeout=5)
    assert (answer.status_code, answer.json()["reason"]) == (409, "Conflict")
    fresh = state.get(NODES, "", "n1")
    fresh["spec"]["unschedulable"] = True
    assert api.put(_url(api, "/api/v1/nodes/n1"), json=fresh, timeout=5).json()["spec"]["unschedulable"] is True


def test_eviction_without_a_budget_is_allowed_and_the_pod_leaves_after_its_grace_period(
        api: requests.Session, state: KubeState, clock: ManualClock) -> None:
    state.add_node("n1")
    uid = state.add_pod("solo", "n1", grace=20)["metadata"]["uid"]
    answer = _evict(api, "solo")
    assert answer.status_code == 200
    assert answer.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200}
    pod = api.get(_url(api, "/api/v1/namespaces/default/pods/solo"), timeout=5).json()
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 20 and pod["metadata"]["deletionTimestamp"]
    clock.advance(19)
    assert api.get(_url(api, "/api/v1/namespaces/default/pods/solo"), timeout=5).status_code == 200
    clock.advance(1)
    assert api.get(_url(api, "/api/v1/namespaces/default/pods/solo"), timeout=5).status_code == 404
    assert [(r.name, r.uid) for r in state.removals] == [("solo", uid)]


def test_eviction_grace_period_option_overrides_the_pods(api: requests.Session, state: KubeState) -> None:
    state.add_node("n1")
    state.add_pod("solo", "n1", grace=600)
    assert _evict(api, "solo", gracePeriodSeconds=0).status_code == 200
    assert state.find(PODS, "default", "solo") is None


def test_dry_run_in_the_body_of_an_eviction_or_delete_changes_nothing(
        api: requests.Session, state: KubeState) -> None:
    """kubectl drain/delete --dry-run=server put dryRun in the Eviction's deleteOptions / the
    DeleteOptions body, not the query: it must be honoured like ?dryRun=All."""
    _web(state, replicas=2)
    state.add_pdb("web", selector={"app": "web"}, min_available=1)
    version = state.resource_version
    assert _evict(api, "web-0", dryRun=["All"]).status_code == 200
    assert _evict(api, "web-1", dryRun=["All"]).status_code == 200  # nothing was evicted, the budget still allows one
    deleted = api.delete(_url(api, "/api/v1/namespaces/default/pods/web-0"), json={"dryRun": ["All"]}, timeout=5)
    assert deleted.status_code == 200 and deleted.json()["metadata"]["name"] == "web-0"
    assert state.resource_version == version
    for name in ("web-0", "web-1"):
        assert "deletionTimestamp" not in state.find(PODS, "default", name)["metadata"]
    assert _evict(api, "web-0", dryRun=["Some"]).status_code == 400  # validated like the query parameter
    assert api.delete(_url(api, "/api/v1/namespaces/default/pods/web-0"), json={"dryRun": "All"},
                      timeout=5).status_code == 400
    assert "deletionTimestamp" not in state.find(PODS, "default", "web-0")["metadata"]


def test_the_disruption_allowed_condition_has_a_last_transition_time_that_moves_only_on_a_flip(
        api: requests.Session, state: KubeState, clock: ManualClock) -> None:
    """metav1.Condition requires lastTransitionTime (typed clients refuse a PDB without it)."""
    from datetime import datetime, timezone

    def condition() -> Json:
        pdb = api.get(_url(api, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web"), timeout=5).json()
        [found] = pdb["status"]["conditions"]
        return found

    _web(state, replicas=2, grace=30)
    state.add_pdb("web", selector={"app": "web"}, min_available=1)
    first = condition()
    assert first["status"] == "True"
    assert datetime.strptime(first["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=timezone.utc).timestamp() == int(clock.now())
    clock.advance(60)
    assert condition()["lastTransitionTime"] == first["lastTransitionTime"]  # no flip, no change
    assert _evict(api, "web-0").status_code == 200
    flipped = condition()
    assert flipped["status"] == "False" and flipped["lastTransitionTime"] != first["lastTransitionTime"]
    clock.advance(POD_START_SECONDS / 2)  # web-0's replacement is still starting: no flip
    listed = api.get(_url(api, "/apis/policy/v1/namespaces/default/poddisruptionbudgets"), timeout=5).json()
    assert listed["items"][0]["status"]["conditions"][0]["lastTransitionTime"] == flipped["lastTransitionTime"]
    clock.advance(POD_START_SECONDS)  # the replacement is Ready: the budget allows one again
    back = condition()
    assert back["status"] == "True" and back["lastTransitionTime"] != flipped["lastTransitionTime"]


def _budget_answer(api: requests.Session, state: KubeState, **spec: Any) -> requests.Response:
    _web(state, replicas=3)
    state.add_pdb("web", selector={"app": "web"}, **spec)
    return _evict(api, "web-0")


@pytest.mark.parametrize("spec, allowed", [
    ({"min_available": 2}, True), ({"min_available": 3}, False),
    ({"min_available": "60%"}, True),   # ceil(1.8) = 2 of 3
    ({"min_available": "67%"}, False),  # ceil(2.01) = 3 of 3
    ({"max_unavailable": 1}, True), ({"max_unavailable": 0}, False),
    ({"max_unavailable": "10%"}, True),  # rounded up to 1
    ({"max_unavailable": "0%"}, False),
])
def test_budget_arithmetic(api: requests.Session, state: KubeState, spec: Dict[str, Any], allowed: bool) -> None:
    answer = _budget_answer(api, state, **spec)
    assert answer.status_code == (200 if allowed else 429), answer.text


def test_a_refused_eviction_has_the_api_servers_status_body(api: requests.Session, state: KubeState) -> None:
    answer = _budget_answer(api, state, min_available=3)
    assert answer.status_code == 429
    assert answer.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget",
                                "message": "The disruption budget web needs 3 healthy pods and has 3 currently"}]},
        "code": 429}
    assert state.find(PODS, "default", "web-0")["metadata"].get("deletionTimestamp") is None


def test_the_budget_counts_terminating_pods_as_disrupted_until_replaced(
        api: requests.Session, state: KubeState, clock: ManualClock) -> None:
    _web(state, replicas=2, grace=10)
    state.add_node("n2")
    state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)
    assert _evict(api, "web-0").status_code == 200
    assert _evict(api, "web-1").status_code == 429
    pdb = api.get(_url(api, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web"), timeout=5).json()
    assert (pdb["status"]["currentHealthy"], pdb["status"]["desiredHealthy"], pdb["status"]["disruptionsAllowed"],
            pdb["status"]["expectedPods"]) == (1, 1, 0, 2)
    assert list(pdb["status"]["disruptedPods"]) == ["web-0"]
    clock.advance(10)  # web-0 leaves; the ReplicaSet's replacement runs on n2
    assert _evict(api, "web-1").status_code == 200


def test_a_replicaset_replaces_a_pod_when_it_starts_terminating_and_the_budget_opens_once_it_is_ready(
        api: requests.Session, state: KubeState, clock: ManualClock) -> None:
    """The ReplicaSet controller counts active pods only (IsPodActive: no deletionTimestamp), so the
    replacement starts at the eviction, not after the grace period; the budget allows the next
    eviction once the replacement is Ready, while the evicted pod is still terminating."""
    _web(state, replicas=2, grace=60)
    state.add_node("n2")
    state.patch(NODES, "", "n1", "application/merge-patch+json", {"spec": {"unschedulable": True}})  # draining
    state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)
    assert _evict(api, "web-0").status_code == 200
    [new] = [p for p in state.list(PODS) if p["metadata"]["name"] not in ("web-0", "web-1")]
    assert new["spec"]["nodeName"] == "n2" and new["metadata"]["generateName"] == "web-"
    assert new["status"]["phase"] == "Running" and not disruption.is_ready(new)  # still starting
    assert _evict(api, "web-1").status_code == 429
    clock.advance(POD_START_SECONDS)
    assert disruption.is_ready(state.get(PODS, "default", new["metadata"]["name"]))
    assert state.get(PODS, "default", "web-0")["metadata"]["deletionTimestamp"]  # 55 s of grace left
    assert _evict(api, "web-1").status_code == 200
    clock.advance(60)  # both leave; web-0 was replaced once, not again when it left
    assert sorted(p["spec"]["nodeName"] for p in state.list(PODS)) == ["n2", "n2"]


def test_two_budgets_over_one_pod_are_a_500(api: requests.Session, state: KubeState) -> None:
    _web(state)
    state.add_pdb("one", selector={"app": "web"}, min_available=1)
    state.add_pdb("two", selector={"app": "web"}, max_unavailable=1)
    answer = _evict(api, "web-0")
    assert (answer.status_code, answer.json()["reason"]) == (500, "InternalError")
    assert "more than one PodDisruptionBudget" in answer.json()["message"]


def test_evicting_an_unknown_pod_is_404_and_a_wrong_uid_409(api: requests.Session, state: KubeState) -> None:
    state.add_node("n1")
    state.add_pod("p", "n1")
    assert _evict(api, "ghost").status_code == 404
    answer = _evict(api, "p", preconditions={"uid": "00000000-0000-0000-0000-000000000000"})
    assert (answer.status_code, answer.json()["reason"]) == (409, "Conflict")


def test_a_statefulset_pod_comes_back_under_its_name_with_a_new_uid(
        api: requests.Session, state: KubeState, clock: ManualClock) -> None:
    state.add_node("n1")
    state.add_node("n2")
    old = state.add_pod("db-0", "n1", owner="StatefulSet/db", grace=5)
    assert _evict(api, "db-0").status_code == 200
    clock.advance(5)
    new = api.get(_url(api, "/api/v1/namespaces/default/pods/db-0"), timeout=5).json()
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["nodeName"] == "n1"  # n1 was never cordoned here
    state.patch(NODES, "", "n1", "application/merge-patch+json", {"spec": {"unschedulable": True}})
    assert _evict(api, "db-0").status_code == 200
    clock.advance(5)
    assert state.get(PODS, "default", "db-0")["spec"]["nodeName"] == "n2"


def test_unhealthy_pods_may_go_while_the_budget_is_met(api: requests.Session, state: KubeState) -> None:
    _web(state, replicas=3)
    state.add_pod("web-sick", "n1", labels={"app": "web"}, owner="ReplicaSet/web", ready=False)
    state.add_pdb("web", selector={"app": "web"}, min_available=3)
    assert _evict(api, "web-sick").status_code == 200  # 3 healthy >= 3 desired
    assert _evict(api, "web-0").status_code == 429


@pytest.mark.parametrize("budget", [{"min_available": 0}, {"max_unavailable": 1}])
def test_an_unhealthy_pod_under_a_budget_that_desires_none_is_a_429(
        api: requests.Session, state: KubeState, budget: Dict[str, Any]) -> None:
    # the real eviction subresource takes the IfHealthyBudget shortcut only when desiredHealthy > 0;
    # here desired is 0, so the normal check runs and finds disruptionsAllowed == 0
    state.add_node("n1")
    state.add_replicaset("web", 1, labels={"app": "web"})
    state.add_pod("web-0", "n1", labels={"app": "web"}, owner="ReplicaSet/web", ready=False)
    state.add_pdb("web", selector={"app": "web"}, **budget)
    answer = _evict(api, "web-0")
    assert (answer.status_code, answer.json()["reason"]) == (429, "TooManyRequests")
    assert not state.get(PODS, "default", "web-0")["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("budget", [{"min_available": "50%"}, {"max_unavailable": 1}])
def test_an_unhealthy_pod_without_a_controller_under_a_scaled_budget_is_a_429(
        api: requests.Session, state: KubeState, budget: Dict[str, Any]) -> None:
    # the controller cannot compute a scale for a pod without one: desired 0, nothing allowed
    state.add_node("n1")
    state.add_pod("lone", "n1", labels={"app": "lone"}, ready=False)
    state.add_pdb("lone", selector={"app": "lone"}, **budget)
    assert _evict(api, "lone").status_code == 429


def _event(**overrides: Optional[str]) -> Json:
    event: Json = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"generateName": "vmss000000."},
                   "eventTime": "2026-11-24T07:00:00.000000Z", "reportingController": "vmss-terminate",
                   "reportingInstance": "vmss-terminate-vmss000000", "action": "Drain", "reason": "TerminateNotice",
                   "type": "Normal", "note": "Terminate event X, NotBefore ...",
                   "regarding": {"kind": "Node", "name": "vmss000000", "apiVersion": "v1"}}
    event.update(overrides)
    return {k: v for k, v in event.items() if v is not None}


def test_events_are_created_and_validated(api: requests.Session, state: KubeState) -> None:
    url = _url(api, "/apis/events.k8s.io/v1/namespaces/default/events")
    created = api.post(url, json=_event(), timeout=5)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["name"].startswith("vmss000000.")
    assert [e["reason"] for e in state.list(NEW_EVENTS)] == ["TerminateNotice"]
    # one resource in two shapes: kubectl get events / describe read the core v1 one
    (core,) = api.get(_url(api, "/api/v1/namespaces/default/events"), timeout=5,
                      params={"fieldSelector": "involvedObject.kind=Node,involvedObject.name=vmss000000"}).json()["items"]
    assert (core["involvedObject"]["name"], core["message"], core["reportingComponent"], core["source"]) == \
        ("vmss000000", "Terminate event X, NotBefore ...", "vmss-terminate", {"component": "vmss-terminate"})
    missing = api.post(url, json=_event(reportingController=None), timeout=5)
    assert (missing.status_code, missing.json()["reason"]) == (422, "Invalid")
    assert api.post(_url(api, "/api/v1/namespaces/default/events"), timeout=5, json={
        "metadata": {"name": "e1"}, "reason": "TerminateNotice", "message": "m",
        "involvedObject": {"kind": "Node", "name": "vmss000000"}}).status_code == 201
    new = api.get(_url(api, "/apis/events.k8s.io/v1/namespaces/default/events/e1"), timeout=5).json()
    assert (new["apiVersion"], new["regarding"]["name"], new["note"]) == ("events.k8s.io/v1", "vmss000000", "m")
    assert api.post(_url(api, "/apis/events.k8s.io/v1/namespaces/nowhere/events"), json=_event(),
                    timeout=5).status_code == 404


def _watch(api: requests.Session, clock: ManualClock, **params: str) -> List[Json]:
    """What a 1 s watch streams: the clock (the `kube` fixture's watch clock) passes its timeout once
    the answer has begun, so the stream ends (cleanly) without a real second waited."""
    with api.get(_url(api, "/api/v1/namespaces/default/pods"), timeout=10, stream=True,
                 params={"watch": "true", "timeoutSeconds": "1", **params}) as answer:
        assert answer.status_code == 200, answer.text
        clock.advance(1)
        return [json.loads(line) for line in answer.iter_lines() if line]


def test_a_watch_sees_an_eviction_and_the_pod_leaving(api: requests.Session, state: KubeState,
                                                        clock: ManualClock) -> None:
    state.add_node("n1")
    state.add_pod("other", "n1")
    state.add_pod("p", "n1", grace=5)
    first = _watch(api, clock, fieldSelector="metadata.name=p", allowWatchBookmarks="true")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in first[:-1]] == [("ADDED", "p")]
    since = first[-1]["object"]["metadata"]["resourceVersion"]
    assert first[-1]["type"] == "BOOKMARK" and since == state.resource_version
    assert _watch(api, clock, resourceVersion=since, fieldSelector="metadata.name=p") == []  # nothing yet
    assert _evict(api, "p").status_code == 200
    clock.advance(5)
    changes = _watch(api, clock, resourceVersion=since, fieldSelector="metadata.name=p")
    assert [e["type"] for e in changes] == ["MODIFIED", "DELETED"]
    assert changes[0]["object"]["metadata"]["deletionTimestamp"]
    assert int(changes[1]["object"]["metadata"]["resourceVersion"]) > int(changes[0]["object"]["metadata"]["resourceVersion"])


def test_a_watch_stays_open_streaming_changes_until_the_server_stops(state: KubeState) -> None:
    """kubectl get -w: one answer carries the first objects and every later change; no timeoutSeconds
    means the server's default (minutes), and stopping the server ends the stream cleanly."""
    state.add_node("n1")
    state.add_pod("p", "n1")
    with start_kube(state, token="t") as servers:
        answer = requests.get(servers.url + "/api/v1/namespaces/default/pods", stream=True, timeout=30,
                              headers={"Authorization": "Bearer t"}, params={"watch": "true"})
        assert answer.status_code == 200 and answer.headers["Transfer-Encoding"] == "chunked"
        lines = answer.iter_lines()
        assert [json.loads(next(lines))["type"]] == ["ADDED"]
        state.patch(PODS, "default", "p", "application/merge-patch+json", {"metadata": {"labels": {"x": "1"}}})
        modified = json.loads(next(lines))
        assert (modified["type"], modified["object"]["metadata"]["labels"]) == ("MODIFIED", {"x": "1"})
        state.add_pod("q", "n1")
        assert json.loads(next(lines))["object"]["metadata"]["name"] == "q"
        servers.stop()
        assert list(lines) == []  # the closing chunk came: a clean end, no ChunkedEncodingError


def test_a_watch_ends_cleanly_at_its_timeout_on_the_watch_clock(api: requests.Session, kube: KubeServers,
                                                                 clock: ManualClock) -> None:
    """No timeoutSeconds: WATCH_DEFAULT (300 s) on the emulator's watch clock; open just before it,
    ended (the closing chunk: no ChunkedEncodingError) at it."""
    with api.get(_url(api, "/api/v1/nodes"), params={"watch": "true"}, stream=True, timeout=10) as answer:
        assert kube.server.wait_streams(1, 10)
        clock.advance(WATCH_DEFAULT - 1)
        kube.state.add_node("n1")
        lines = answer.iter_lines()
        assert json.loads(next(lines))["object"]["metadata"]["name"] == "n1"
        assert kube.server.open_streams == 1
        clock.advance(1)
        assert list(lines) == []
    assert kube.server.wait_streams(0, 10)


def test_a_watch_asking_for_a_table_gets_one_row_tables_with_the_columns_once(
        api: requests.Session, kube: KubeServers, clock: ManualClock) -> None:
    """What kubectl get -w asks for: each object a one-row Table, column definitions only in the first
    (the API server's watch encoder sets NoHeaders after it), so kubectl prints one header."""
    kube.state.add_node("n1")
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    with api.get(_url(api, "/api/v1/nodes"), params={"watch": "true", "timeoutSeconds": "5"}, stream=True,
                 timeout=10, headers={"Accept": accept}) as answer:
        lines = answer.iter_lines()
        first = json.loads(next(lines))
        kube.state.patch(NODES, "", "n1", "application/merge-patch+json", {"spec": {"unschedulable": True}})
        second = json.loads(next(lines))
        clock.advance(5)
    assert (first["type"], first["object"]["kind"], second["type"]) == ("ADDED", "Table", "MODIFIED")
    assert [c["name"] for c in first["object"]["columnDefinitions"]][:2] == ["Name", "Status"]
    assert second["object"]["columnDefinitions"] == []
    assert second["object"]["rows"][0]["cells"][:2] == ["n1", "Ready,SchedulingDisabled"]


def test_a_watch_whose_client_hangs_up_is_released_at_once(state: KubeState) -> None:
    """Issue 27 item 11: a watch whose client went away held its handler thread and socket until its
    timeout (minutes; here it never comes: the watch clock stands still). A hang-up ends it at once."""
    state.add_node("n1")
    with start_kube(state, token="t") as servers:
        servers.app.watch_clock = ManualClock()
        client = socket.create_connection((servers.server.address, servers.server.port), timeout=10)
        client.sendall(b"GET /api/v1/nodes?watch=true HTTP/1.1\r\nHost: kube\r\nAuthorization: Bearer t\r\n\r\n")
        reader = client.makefile("rb")
        assert reader.readline().startswith(b"HTTP/1.1 200")
        assert servers.server.wait_streams(1, 10)
        reader.close()
        client.close()
        assert servers.server.wait_streams(0, 10) and servers.server.wait_connections(0, 10)


def test_a_watch_timeout_must_be_a_non_negative_number(api: requests.Session) -> None:
    for value in ("soon", "-1"):
        answer = api.get(_url(api, "/api/v1/pods"), params={"watch": "true", "timeoutSeconds": value}, timeout=5)
        assert answer.status_code == 400


def test_a_watch_on_one_object_path_is_refused(api: requests.Session, state: KubeState) -> None:
    state.add_node("n1")
    state.add_pod("p", "n1")
    answer = api.get(_url(api, "/api/v1/namespaces/default/pods/p"), params={"watch": "true"}, timeout=5)
    assert answer.status_code == 405


def test_objects_are_created_in_their_namespace_only(api: requests.Session) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}
    assert api.post(_url(api, "/api/v1/configmaps"), json=body, timeout=5).status_code == 405
    assert api.post(_url(api, "/api/v1/namespaces/default/configmaps"), json=body, timeout=5).status_code == 201
    other = api.post(_url(api, "/api/v1/namespaces/kube-system/configmaps"), json=body, timeout=5)
    assert (other.status_code, other.json()["reason"]) == (400, "BadRequest")  # the body names another namespace
    assert api.delete(_url(api, "/api/v1/namespaces/default/configmaps"), timeout=5).status_code == 405


def test_with_no_node_to_take_the_replacement_the_budget_stays_closed(
        api: requests.Session, state: KubeState, clock: ManualClock) -> None:
    """The faithful stuck drain: the only other node is cordoned, the ReplicaSet's replacement stays
    Pending, so the budget never allows the second eviction (kubectl drain would wait forever too)."""
    _web(state, replicas=2, grace=1)
    state.add_node("n2", unschedulable=True)
    state.patch(NODES, "", "n1", "application/merge-patch+json", {"spec": {"unschedulable": True}})  # draining
    state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)
    assert _evict(api, "web-0").status_code == 200
    clock.advance(1)
    pending = [p for p in state.list(PODS) if p["metadata"]["name"] not in ("web-0", "web-1")]
    assert [(p["status"]["phase"], p["spec"].get("nodeName")) for p in pending] == [("Pending", None)]
    assert _evict(api, "web-1").status_code == 429


def test_deleting_a_node_removes_its_pods_and_replaces_them_elsewhere(api: requests.Session, state: KubeState) -> None:
    _web(state, replicas=1, node="n1")
    state.add_node("n2")
    assert api.delete(_url(api, "/api/v1/nodes/n1"), timeout=5).status_code == 200
    assert [r.name for r in state.removals] == ["web-0"]
    assert [p["spec"]["nodeName"] for p in state.list(PODS)] == ["n2"]


def test_a_service_account_token_authenticates_and_rbac_authorizes_it(kube: KubeServers, api: requests.Session) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
              "metadata": {"name": "agent-token", "annotations": {"kubernetes.io/service-account.name": "agent"}}}
    orphan = api.post(_url(api, "/api/v1/namespaces/default/secrets"), json=secret, timeout=5).json()
    assert "data" not in orphan  # no such ServiceAccount (yet): the token controller leaves it alone
    api.delete(_url(api, "/api/v1/namespaces/default/secrets/agent-token"), timeout=5)
    api.post(_url(api, "/api/v1/namespaces/default/serviceaccounts"), json={"metadata": {"name": "agent"}}, timeout=5)
    filled = api.post(_url(api, "/api/v1/namespaces/default/secrets"), json=secret, timeout=5).json()
    token = base64.b64decode(filled["data"]["token"]).decode()
    as_agent = {"Authorization": f"Bearer {token}"}
    assert requests.get(kube.url + "/api", headers=as_agent, timeout=5).status_code == 200  # discovery: open
    denied = requests.get(kube.url + "/api/v1/nodes", headers=as_agent, timeout=5)  # authenticated, no RBAC yet
    assert (denied.status_code, denied.json()["reason"], denied.json()["message"]) == (
        403, "Forbidden", 'nodes is forbidden: User "system:serviceaccount:default:agent" cannot list resource '
                          '"nodes" in API group "" at the cluster scope')
    api.post(_url(api, "/apis/rbac.authorization.k8s.io/v1/clusterroles"), timeout=5, json={
        "metadata": {"name": "node-reader"}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]})
    api.post(_url(api, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"), timeout=5, json={
        "metadata": {"name": "agent-reads-nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "default"}]})
    assert requests.get(kube.url + "/api/v1/nodes", headers=as_agent, timeout=5).status_code == 200
    assert requests.get(kube.url + "/api/v1/pods", headers=as_agent, timeout=5).status_code == 403
    api.delete(_url(api, "/api/v1/namespaces/default/serviceaccounts/agent"), timeout=5)
    assert requests.get(kube.url + "/api/v1/nodes", headers=as_agent, timeout=5).status_code == 401


def test_the_faults_admin_route_needs_the_emulators_own_token(kube: KubeServers, api: requests.Session) -> None:
    """Breaking the API server is cluster-admin work: without the token 401 (as every API request),
    with a service account's token 403, with the emulator's token the route works."""
    fault = {"status": 503, "path": "/api/v1/nodes"}
    anonymous = requests.post(kube.url + "/emulator/faults", json=fault, timeout=5)
    assert (anonymous.status_code, anonymous.json()["reason"]) == (401, "Unauthorized")
    assert requests.get(kube.url + "/emulator/faults", timeout=5).status_code == 401
    assert requests.delete(kube.url + "/emulator/faults", timeout=5).status_code == 401
    api.post(_url(api, "/api/v1/namespaces/default/serviceaccounts"), json={"metadata": {"name": "sa"}}, timeout=5)
    secret = api.post(_url(api, "/api/v1/namespaces/default/secrets"), timeout=5, json={
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "sa-token", "annotations": {"kubernetes.io/service-account.name": "sa"}}}).json()
    as_sa = {"Authorization": "Bearer " + base64.b64decode(secret["data"]["token"]).decode()}
    forbidden = requests.post(kube.url + "/emulator/faults", json=fault, headers=as_sa, timeout=5)
    assert (forbidden.status_code, forbidden.json()["reason"]) == (403, "Forbidden")
    assert kube.server.faults.queued() == []
    assert api.post(_url(api, "/emulator/faults"), json=fault, timeout=5).status_code == 201
    assert api.get(_url(api, "/api/v1/nodes"), timeout=5).status_code == 503
