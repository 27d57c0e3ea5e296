"""An upgrade keeps the central journal: a state file exactly as the handler before the pipeline
(6884e8f) wrote it -- events keyed `{scale set id}/{event id}` in lower case with `acknowledged`,
each VM's node drain under `...@{vm}` -- is read by today's handler (`central/legacy.py`): a withheld
event is not handled again, an acknowledged one still Scheduled in a lagging Resource Graph is not
acknowledged twice, a canceled event's cordon is undone."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict

from helpers import poll_until

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.pipeline.journal import StateStore
from vmss_terminate_sim.emulator.arm.app import ArmServers
from vmss_terminate_sim.emulator.kube import NODES, KubeState, start_kube

from .conftest import SUB, Estate

HOOK = "import json, os, sys; e = json.load(sys.stdin); open(os.path.join(sys.argv[1], e['VmName']), 'w').close()"



def _old_state_file(path: Path, events: Dict[str, Dict[str, Any]]) -> None:
    """As 6884e8f's StateStore wrote it (version 1, indent 1, keys sorted)."""
    path.write_text(json.dumps({"version": 1, "events": events}, indent=1, sort_keys=True))


def test_a_journal_of_the_handler_before_the_pipeline_is_migrated(live_arm: ArmServers, live: Estate,
                                                                  tmp_path: Path) -> None:
    group = live.groups["lin"]
    now = SYSTEM_CLOCK.now()
    withheld = group.add_event("Terminate", ["lin_0"], not_before=now + 600)
    acknowledged = group.add_event("Terminate", ["lin_1"], not_before=now + 600)  # Resource Graph lags
    set_key = live.set_id("lin").lower()
    hook = f"{sys.executable} -c \"{HOOK}\" {tmp_path}"
    step = f"hook#1:{sys.executable}"
    state = tmp_path / "state.json"
    _old_state_file(state, {
        f"{set_key}/{withheld.lower()}": {"seen": now - 30, "scale_set": live.set_id("lin"), "steps_done": [],
                                          "withheld": f"a step failed ({step}@lin_0) and --on-failure wait: "
                                                      "not acknowledged"},
        f"{set_key}/{acknowledged.lower()}": {"seen": now - 30, "scale_set": live.set_id("lin"),
                                              "steps_done": [f"{step}@lin_1"], "acknowledged": now - 20},
    })
    central = build(Scope.build(subscriptions=[SUB]), HandlerConfig(hooks=(hook,), on_failure="wait"),
                    connection=Connection(arm_endpoint=live_arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                    state_file=str(state))
    try:
        central.handler.poll_once(wait=True)
        central.handler.poll_once(wait=True)
    finally:
        central.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lin_")) == []  # no hook ran again
    assert live.state.maintenance.acknowledgements == []  # neither acknowledged (again)
    journal = StateStore(str(state))
    assert journal.get(acknowledged).get("approved") == now - 20
    assert "withheld" in journal.get(withheld)
    assert not [k for k in journal.event_ids() if k.startswith("/subscriptions/")]


def test_an_old_cordon_is_undone_when_its_event_is_canceled_after_the_upgrade(live_arm: ArmServers, live: Estate,
                                                                             tmp_path: Path) -> None:
    group = live.groups["lin"]
    now = SYSTEM_CLOCK.now()
    eid = group.add_event("Terminate", ["lin_2"], not_before=now + 600)
    key = f"{live.set_id('lin').lower()}/{eid.lower()}"
    state = tmp_path / "state.json"
    _old_state_file(state, {  # the old handler was stopped mid-drain of lin_2
        key: {"seen": now - 30, "scale_set": live.set_id("lin"), "steps_done": []},
        f"{key}@lin_2": {"kube_node": "lin-node-2", "kube_cordoned": True, "kube_drain_started": now - 25,
                         "kube_event_started": True},
    })
    kube_state = KubeState(clock=SYSTEM_CLOCK)
    kube_state.add_node("lin-node-2", provider_id=f"azure://{live.set_id('lin')}/virtualMachines/2",
                        unschedulable=True)
    group.remove_event(eid)  # the scale-in was cancelled meanwhile: Resource Graph shows it Canceled
    with start_kube(kube_state) as kube:
        kubeconfig = tmp_path / "kubeconfig"
        kube.write_kubeconfig(kubeconfig)
        central = build(Scope.build(subscriptions=[SUB]), HandlerConfig(kubernetes=True),
                        connection=Connection(arm_endpoint=live_arm.arm_url), kubeconfig=str(kubeconfig),
                        state_file=str(state))
        try:
            central.handler.poll_once(wait=True)
            assert poll_until(lambda: not kube_state.find(NODES, None, "lin-node-2")["spec"].get("unschedulable"))
        finally:
            central.close()
    assert live.state.maintenance.acknowledgements == []
