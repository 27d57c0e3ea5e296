"""Issue 27 item 8: a redirect (3xx) from the Kubernetes API server during a drain. It is a
configuration error (the kubeconfig's server is not the API server, or a proxy redirects), never a
transient one: the drain's client neither follows it (the bearer token never reaches the
Location) nor retries it; the drain fails at once with one line naming the status and the
Location's origin, and --on-hook-failure decides. Real HTTP on loopback (the Kubernetes API
emulator answering 307, a second loopback server as the redirect's target), a ManualClock: before
the fix the drain retried on it until the deadline."""

from __future__ import annotations

import threading
from typing import Any, Iterator, List, Tuple

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.events import Event
from vmss_terminate.pipeline.hooks import FAILED, Run
from vmss_terminate.pipeline.journal import StateStore
from vmss_terminate.pipeline.kubernetes.api import KubeApi, location_origin
from vmss_terminate.pipeline.kubernetes.credentials import Access
from vmss_terminate.pipeline.kubernetes.drain import DrainTarget, NodeDrain
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response

from ..conftest import Running
from .conftest import NODE, TOKEN, VM, Cluster


class _Trap:
    """The redirect's target: records whatever reaches it (nothing must)."""

    def __init__(self) -> None:
        self.seen: List[Request] = []

    def handle(self, request: Request) -> Response:
        self.seen.append(request)
        return Response.json(200, {"kind": "NodeList", "items": []})


@pytest.fixture(scope="module")
def trap() -> Iterator[Tuple[EmulatorServer, _Trap]]:
    app = _Trap()
    with EmulatorServer(app) as server:
        yield server, app


Said = List[Tuple[str, str]]


def _drain(cluster: Cluster, clock: ManualClock) -> Tuple[NodeDrain, Run, Said]:
    said: Said = []
    api = KubeApi(Access(server=cluster.kube.url, source="test", token=lambda: TOKEN))  # plain http, loopback
    drain = NodeDrain(api, StateStore(), lambda kind, eid, message, **data: said.append((kind, message)),
                      lambda event: [DrainTarget(identity=lambda: ("", ""), node_name=NODE)], clock,
                      reporter=lambda: VM)
    event = Event.from_json({"EventId": "E1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
                             "Resources": [VM], "EventStatus": "Scheduled", "NotBefore": ""})
    deadline = clock.now() + 585.0
    return drain, Run(event, VM, clock, lambda: deadline, threading.Event(), threading.Event()), said


def _redirect(cluster: Cluster, trap: Tuple[EmulatorServer, _Trap], path: str) -> None:
    cluster.kube.server.faults.add(status=307, times=None, path_contains=path,
                                   headers={"Location": trap[0].url + "/api/v1/nodes?token=x"})


def test_a_redirect_of_the_node_read_fails_the_drain_at_once(cluster: Cluster, trap: Tuple[EmulatorServer, _Trap]) -> None:
    _redirect(cluster, trap, f"/api/v1/nodes/{NODE}")
    clock = ManualClock()
    drain, run, said = _drain(cluster, clock)
    began = clock.monotonic()
    result = drain.run(run)
    assert result.outcome == FAILED, result
    assert clock.monotonic() == began  # no backoff waited: not retried (it retried until the deadline)
    assert cluster.kube.server.log.count("GET", f"/api/v1/nodes/{NODE}") == 1
    assert trap[1].seen == []  # never followed: the token never went to the Location
    errors = [message for kind, message in said if kind == D.KUBE_ERROR]
    assert len(errors) == 1 and "\n" not in errors[0], said
    assert f"answered a 307 redirect to {trap[0].url};" in errors[0] and "drain stopped" in errors[0]
    assert "token=x" not in errors[0]  # the origin, not what the Location carries
    assert "unschedulable" not in cluster.node()["spec"]  # failed before the cordon


def test_a_redirected_eviction_ends_every_pods_retries_and_the_drain(
        cluster: Cluster, trap: Tuple[EmulatorServer, _Trap]) -> None:
    """One pod's eviction is redirected while the others are refused by their budget (429, retried
    with backoff): the redirect ends them all, the step fails naming it."""
    cluster.state.add_replicaset("db", 3, labels={"app": "db"})
    for name in ("db-0", "db-1", "db-2"):
        cluster.state.add_pod(name, NODE, labels={"app": "db"}, owner="ReplicaSet/db", grace=10)
    cluster.state.add_pdb("db", selector={"app": "db"}, max_unavailable=0)  # every eviction: 429
    _redirect(cluster, trap, "/pods/db-1/eviction")
    clock = ManualClock()
    drain, run, said = _drain(cluster, clock)
    result = drain.run(run)
    assert result.outcome == FAILED and "307 redirect" in result.detail, result
    assert cluster.kube.server.log.count("POST", "/pods/db-1/eviction") == 1
    assert clock.now() < run.deadline() - 500  # (a worker may have waited a backoff step or two)
    assert trap[1].seen == []
    assert sorted(cluster.pods_on(NODE)) == ["db-0", "db-1", "db-2"]


def test_the_agent_approves_a_redirected_drain_at_once_as_on_hook_failure_says(
        cluster: Cluster, trap: Tuple[EmulatorServer, _Trap]) -> None:
    """The drain failed (not 'deadline'): --on-hook-failure approve (the default) approves now, with
    the reason in the hook_failed line; it did so only at the deadline before."""
    agent = cluster.agent()
    with Running(agent) as running:
        assert running.decisions.wait_kind(D.KUBE_NODE, None, timeout=30)  # started healthy (a redirect
        _redirect(cluster, trap, "/api/v1/nodes")  # at start-up is exit 2: test_startup_check)
        not_before = cluster.clock.now() + 600
        eid = cluster.group.add_event("Terminate", [VM], not_before=not_before)
        assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=60)
    items: List[Any] = running.decisions.items
    failed = [d for d in items if d.kind == D.HOOK_FAILED and d.event_id == eid]
    assert failed and failed[0].data["outcome"] == "failed" and "307 redirect" in failed[0].message, failed
    approval = next(d for d in items if d.kind == D.APPROVAL_SENT)
    assert approval.at < not_before - 500  # at once, not at the deadline (NotBefore - 15 s)
    assert trap[1].seen == []


def test_an_undo_answered_a_redirect_says_the_kubectl_commands_at_once(
        cluster: Cluster, trap: Tuple[EmulatorServer, _Trap]) -> None:
    _redirect(cluster, trap, f"/api/v1/nodes/{NODE}")
    clock = ManualClock()
    drain, _, said = _drain(cluster, clock)
    began = clock.monotonic()
    assert drain.undo("E1", {"kube_node": NODE, "kube_cordoned": True}, "scale-in cancelled") is False
    assert clock.monotonic() == began  # not retried for UNDO_FOR (60 s)
    assert cluster.kube.server.log.count("GET", f"/api/v1/nodes/{NODE}") == 1 and trap[1].seen == []
    assert any(kind == D.KUBE_ERROR and "307 redirect" in message and f"kubectl uncordon {NODE}" in message
               for kind, message in said), said


def test_location_origin_names_scheme_host_and_port_only() -> None:
    server = "https://10.0.0.1:6443"
    assert location_origin("https://user:pw@proxy.example:8443/a?b=c", server) == "https://proxy.example:8443"
    assert location_origin("/login?next=/api", server) == f"{server} itself (a relative Location)"
    assert location_origin(None, server) == "nowhere (no Location)"
    assert location_origin("http://[::1]:80/x", server) == "http://[::1]:80"
    assert location_origin("http://[bad", server) == "an unreadable Location"
