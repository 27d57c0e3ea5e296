"""The acknowledgement against the event as last read: a poll that widens the event between the
policy's check and the acknowledgement stops it (the new VM's steps run first), and `handle()`
says why an event was not acknowledged when no decision did."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator, List

import pytest

from vmss_terminate.central import ScaleSetRef, event_from_fields
from vmss_terminate.central.handler import HandlerConfig, pipeline_event
from vmss_terminate.central.run import Central, build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import SUB, Estate


@pytest.fixture
def central(live_arm: ArmServers, tmp_path: Path) -> Iterator[Central]:
    made = build(Scope.build(subscriptions=[SUB]), HandlerConfig(),
                 connection=Connection(arm_endpoint=live_arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                 state_file=str(tmp_path / "state.json"))
    try:
        yield made
    finally:
        made.close()


def test_an_event_widened_after_the_policy_checked_it_is_not_acknowledged(live: Estate, central: Central) -> None:
    group = live.groups["lin"]
    eid = group.add_event("Terminate", ["lin_1", "lin_2"], not_before=SYSTEM_CLOCK.now() + 600)
    ref = ScaleSetRef.parse(live.set_id("lin"))
    both = event_from_fields(ref, group.get(eid).to_imds())  # type: ignore[union-attr]
    info = central.handler.lookup([ref])[ref.key]
    said: List[Decision] = []
    central.handler.bus.subscribe(said.append)
    central.handler._remember(both, info)  # a poll read it listing lin_1 and lin_2 ...
    checked = pipeline_event(dataclasses.replace(both, resources=("lin_1",)), info)
    central.handler.pipeline.maybe_approve(checked)  # ... after the policy checked it with lin_1 only
    assert live.state.maintenance.acknowledgements == []
    assert not central.handler.journal.get(eid).get("approved")
    assert [d.message for d in said if d.kind == D.APPROVAL_WITHHELD] == [
        f"not acknowledging {eid} yet: it now lists lin_1, lin_2 (checked: lin_1); judged again as read next poll"]


def test_handle_says_why_an_event_widened_while_its_steps_ran_was_not_acknowledged(live: Estate,
                                                                                  central: Central) -> None:
    group = live.groups["lin"]
    eid = group.add_event("Terminate", ["lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    ref = ScaleSetRef.parse(live.set_id("lin"))
    event = event_from_fields(ref, group.get(eid).to_imds())  # type: ignore[union-attr]
    info = central.handler.lookup([ref])[ref.key]

    def widen(event: object, context: object) -> None:  # Azure adds lin_2; a poll reads it while the step runs
        group.update_event(eid, resources=["lin_1", "lin_2"])
        central.handler.poll_once()

    central.handler.pipeline.add_handler("Terminate", widen)
    outcome = central.handler.handle(event, info)
    assert outcome.acknowledged is None and live.state.maintenance.acknowledgements == []
    assert outcome.withheld == f"not approving {eid} yet: it now also lists lin_2"
