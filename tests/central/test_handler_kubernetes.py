"""--kubernetes from the central handler: an event listing two VMs drains both nodes (found by
providerID across the cluster, pods evicted and gone) and is acknowledged once, after both; a VM
that is no node is skipped; a Canceled event uncordons what this handler cordoned."""

from __future__ import annotations

from pathlib import Path

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmServers
from vmss_terminate_sim.emulator.kube import NODES, PODS, KubeState, start_kube

from .conftest import SUB, Estate


def _provider(live: Estate, name: str, instance: str) -> str:
    return f"azure://{live.set_id(name)}/virtualMachines/{instance}"


def test_an_event_listing_two_vms_is_acknowledged_once_after_both_drained(live_arm: ArmServers, live: Estate,
                                                                         tmp_path: Path) -> None:
    kube_state = KubeState(clock=SYSTEM_CLOCK)
    for instance in ("0", "1", "2"):
        kube_state.add_node(f"lin-node-{instance}", provider_id=_provider(live, "lin", instance))
    kube_state.add_pod("web-0", "lin-node-0", grace=0)
    kube_state.add_pod("web-1", "lin-node-1", grace=0)
    kube_state.add_pod("web-2", "lin-node-2", grace=0)
    group = live.groups["lin"]
    eid = group.add_event("Terminate", ["lin_0", "lin_1", "lin_9"], not_before=SYSTEM_CLOCK.now() + 600)
    with start_kube(kube_state) as kube:
        kubeconfig = tmp_path / "kubeconfig"
        kube.write_kubeconfig(kubeconfig)
        # --on-failure wait: a listed VM that is no node (lin_9) is skipped, not a failure
        central = build(Scope.build(subscriptions=[SUB]), HandlerConfig(kubernetes=True, on_failure="wait"),
                        connection=Connection(arm_endpoint=live_arm.arm_url), kubeconfig=str(kubeconfig),
                        state_file=str(tmp_path / "state.json"))
        try:
            central.handler.poll_once(wait=True)
            central.handler.poll_once(wait=True)
        finally:
            central.close()
        evicted = sorted(e.name for e in kube_state.evictions if e.code == 200)
        nodes = {n: kube_state.find(NODES, None, n) for n in ("lin-node-0", "lin-node-1", "lin-node-2")}
        remaining = {name for name in ("web-0", "web-1", "web-2") if kube_state.find(PODS, "default", name)}
    assert remaining == {"web-2"}  # both listed nodes drained, the third left alone
    assert evicted == ["web-0", "web-1"]
    assert nodes["lin-node-0"]["spec"].get("unschedulable") and nodes["lin-node-1"]["spec"].get("unschedulable")
    assert not nodes["lin-node-2"]["spec"].get("unschedulable")
    acks = [a for a in live.state.maintenance.acknowledgements if a.accepted]
    assert [a.event_id for a in acks] == [eid]  # once, after both drains (lin_9 is no node: skipped)
    assert max(e.at for e in kube_state.evictions) <= acks[0].at
