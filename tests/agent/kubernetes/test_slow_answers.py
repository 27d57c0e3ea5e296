"""Issue 27 item 3: a Kubernetes answer that trickles in -- one byte every few seconds, never
tripping a per-read timeout -- holds neither the drain past its deadline nor the agent past a stop.
Real sockets on loopback (the emulator's drip fault); every wait is bounded."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.kubernetes.api import KubeApi, KubeError
from vmss_terminate.pipeline.kubernetes.credentials import Access

from ..conftest import Running
from .conftest import NODE, TOKEN, VM, Cluster

DRIP = 4.0  # seconds between the bytes of an answer: far below the 15 s read timeout


def _api(cluster: Cluster) -> KubeApi:
    return KubeApi(Access(server=cluster.kube.url, source="test", token=lambda: TOKEN))  # plain http, loopback


def test_a_dripping_answer_ends_at_the_callers_bound(cluster: Cluster) -> None:
    cluster.kube.server.faults.add(drip=DRIP, path_contains="/api/v1/nodes", times=None)
    api = _api(cluster)
    began = time.monotonic()
    with api.bounded(lambda: 1.0, None), pytest.raises(KubeError, match="no complete answer"):
        api.request("GET", "/api/v1/nodes")
    assert time.monotonic() - began < 10.0  # unbounded it takes len(answer) * 4 s: many minutes


def test_a_dripping_answer_ends_when_the_caller_stops(cluster: Cluster) -> None:
    cluster.kube.server.faults.add(drip=DRIP, path_contains="/api/v1/nodes", times=None)
    api, stop = _api(cluster), threading.Event()
    failures: List[BaseException] = []

    def call() -> None:
        with api.bounded(lambda: None, stop):
            try:
                api.request("GET", "/api/v1/nodes")
            except KubeError as exc:
                failures.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    assert cluster.kube.server.log.wait_for(lambda r: any("/api/v1/nodes" in x.path for x in r), 10)
    stop.set()
    worker.join(10)
    assert not worker.is_alive() and failures and "stopping" in str(failures[0])


def test_an_eviction_dripping_its_answer_does_not_hold_the_drain_past_its_deadline(cluster: Cluster) -> None:
    cluster.state.add_replicaset("web", 1, labels={"app": "web"})
    cluster.state.add_pod("web-a", NODE, labels={"app": "web"}, owner="ReplicaSet/web", grace=10)
    cluster.kube.server.faults.add(drip=DRIP, path_contains="/eviction", times=None)
    agent = cluster.agent(safety_margin=15.0)
    not_before = cluster.clock.now() + 120  # 6 real seconds at the fixture's speed
    eid = cluster.group.add_event("Terminate", [VM], not_before=not_before)
    try:
        with Running(agent) as running:
            assert running.decisions.wait_kind(D.APPROVAL_SENT, eid, timeout=60)
    finally:
        cluster.kube.server.faults.clear()
    approval = next(d for d in running.decisions.items if d.kind == D.APPROVAL_SENT)
    assert approval.at < not_before  # the drain gave up at its deadline: approved while it still counts
    failed = [d for d in running.decisions.items if d.kind == D.HOOK_FAILED and d.event_id == eid]
    assert failed and failed[0].data["outcome"] == "deadline"
