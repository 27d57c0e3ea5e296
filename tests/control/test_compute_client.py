"""One connection and one SDK client per subscription: a `ComputeClient` is resolved once and
shared by every scale set (and thread) of its subscription; the fleet builds one per subscription."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, List

import pytest

from vmss_terminate.control import Connection, status
from vmss_terminate.control.scaleset import ComputeClient
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """Every Connection.resolve call (a spy: the real method still runs)."""
    seen: List[Any] = []
    real = Connection.resolve

    def spy(self: Connection, *args: Any, **kwargs: Any) -> Any:
        seen.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Connection, "resolve", spy)
    return seen


def test_scale_sets_of_one_subscription_share_one_resolution_and_one_lookup(
        arm: ArmServers, state: ArmState, resolutions: List[Any]) -> None:
    """Two sets read through one ComputeClient: the connection is resolved once and the display
    name looked up once (one GET /subscriptions), not once per set."""
    for name in ("web", "api"):
        state.add_scale_set(SUB, RG, name, capacity=1)
    state.add_subscription(SUB, display_name="Production EU")
    connection = Connection(subscription_id="Production EU", arm_endpoint=arm.arm_url, retry_total=1)
    with ComputeClient(connection) as compute:
        results = [status(RG, name, connection=compute) for name in ("web", "api")]
        with compute.scale_set(RG, "web"):
            pass  # a borrowed client: closing the scale set leaves the subscription's client open
        assert compute.scale_set(RG, "api").get()["name"] == "api"
    assert [r.subscription_id for r in results] == [SUB, SUB]
    assert len(resolutions) == 1
    assert [r.path.split("?")[0] for r in arm.arm_server.log.all()].count("/subscriptions") == 1


def test_one_compute_client_serves_many_threads(arm: ArmServers, state: ArmState) -> None:
    names = [f"vmss{i}" for i in range(12)]
    for name in names:
        state.add_scale_set(SUB, RG, name, capacity=2)
    with ComputeClient(Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, retry_total=1)) as compute:
        with ThreadPoolExecutor(max_workers=12) as pool:
            found = list(pool.map(lambda name: len(compute.scale_set(RG, name).list_instances()), names))
    assert found == [2] * 12


def test_a_fleet_audit_resolves_once_and_builds_one_client_per_subscription(
        shared_arm: ArmServers, monkeypatch: pytest.MonkeyPatch, resolutions: List[Any]) -> None:
    pytest.importorskip("azure.mgmt.resourcegraph")
    from helpers import serve_arm_state

    from vmss_terminate.fleet import audit
    from vmss_terminate.fleet.session import FleetSession

    state = ArmState()
    subscriptions = [f"11111111-0000-0000-0000-00000000000{i}" for i in (1, 2)]
    for subscription in subscriptions:
        state.add_subscription(subscription, display_name=subscription[-1])
        for i in range(5):
            state.add_scale_set(subscription, RG, f"web{i}", capacity=1,
                                scheduled_events_profile={"terminateNotificationProfile": {
                                    "enable": True, "notBeforeTimeout": "PT10M"}})
    state.rg_compute_resources = False  # stale counts from ARM's instance lists, not Resource Graph's summary
    arm = serve_arm_state(shared_arm, state, monkeypatch)
    with FleetSession(Connection(arm_endpoint=arm.arm_url, retry_total=1)) as session:
        report = audit(session=session)
        clients = dict(session._computes)
    assert report.calls["instance_lists"] == 10
    assert sorted(clients) == subscriptions
    assert len(resolutions) == 1
