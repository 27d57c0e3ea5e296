"""End to end on the sandbox: real control plane (Azure SDK + DefaultAzureCredential), real agents,
ARM and IMDS emulators linked by the deletion scheduler. No sleeps: every wait is bounded and waits
on a condition (timeline, scheduler, or request log)."""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime

import pytest
import requests
from e2e_helpers import compute_client, imds_events, resources_by_event, running
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.clock import ScaledClock
from vmss_terminate.control import UpgradeOptions, disable, enable, status
from vmss_terminate.control.scaleset import ScaleSetClient
from vmss_terminate_sim.sandbox import DemoOptions, Sandbox, SandboxAgents, SandboxConfig, demo_hook_command, run_demo

pytestmark = pytest.mark.timeout(60)


def assert_only_own_events_approved(box: Sandbox) -> None:
    """The worst bug: an approval by a VM that is not in the event's Resources."""
    assert box.group.foreign_approvals() == []
    owner = {d.event_id: d.vm_name for d in box.scheduler.deletions() if d.event_id}
    for approval in box.group.approvals:
        assert approval.accepted
        assert owner[approval.event_id] == approval.vm_name, approval


def test_demo_full_story_through_the_cli() -> None:
    result = invoke_cli(main, ["demo", "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["failure"] is None
    assert data["deleted"] == ["myvmss_3", "myvmss_2"]  # Uniform scale-in removes the highest ids
    totals = data["totals"]
    assert totals["drained_and_approved"] == 2 and totals["hooks_finished"] == 2
    assert totals["foreign_approvals"] == 0 and totals["instances_after"] == 2
    assert totals["scale_in_to_deleted_sandbox_s"] < totals["not_before_timeout_s"]
    kinds = [(e["source"], e["kind"]) for e in data["timeline"]]
    for expected in [("control", "enabled"), ("sandbox", "instances_upgraded"), ("control", "scale_in"),
                     ("sandbox", "event_published"), ("agent", "hook_started"), ("agent", "hook_finished"),
                     ("agent", "approval_sent"), ("sandbox", "deletion_started"), ("sandbox", "deleted")]:
        assert expected in kinds
    for vm in ("myvmss_2", "myvmss_3"):
        assert any(line.startswith(f"{vm}:") and f"approved by {vm} " in line for line in data["report"])


@pytest.mark.slow  # two whole demos on scaled real time
def test_demo_text_output_and_failure_exit_code() -> None:
    ok = invoke_cli(main, ["demo", "--instances", "3", "--scale-in", "1", "--timeout", "6"])
    assert ok.exit_code == 0, ok.output
    assert "OK: graceful scale-in completed." in ok.output and "PT6M" in ok.output
    # A hook that fails everywhere: agents still approve (on_hook_failure=approve), but the story is
    # not graceful, so the demo must say so and exit 1.
    failing_hook = demo_hook_command().replace("vmss_terminate_sim.demo_hook", "vmss_terminate.no_such_hook")
    failed = run_demo(DemoOptions(instances=2, scale_in=1, hook=failing_hook))
    assert not failed.ok and "drain hook failed" in (failed.failure or "")


class JumpingClock(ScaledClock):
    """Scaled time that a test can also move forward at once, when what it waited for has happened."""

    def advance(self, seconds: float) -> None:
        self._start += seconds


@pytest.mark.slow  # two deletions of 10 sandbox seconds at x5
def test_unapproved_pending_deletion_holds_back_an_approved_one() -> None:
    # x5: myvmss_3's PT5M is 60 s of real time, slack for myvmss_2's approval to arrive first however
    # loaded the machine (at x75 it had 3 s); once it has, the clock jumps to myvmss_3's NotBefore.
    clock = JumpingClock(speed=5.0)
    with Sandbox(SandboxConfig(instances=4, timeout_minutes=5, speed=5.0, delete_duration=10.0), clock=clock) as box:
        rg, name = box.config.resource_group, box.config.name
        # myvmss_2 runs a PT10M model, myvmss_3 still PT5M: distinct NotBefore whatever the timing,
        # so this is the "pending" case, not the "simultaneous" one.
        enable(rg, name, 10, connection=box.connection(), options=UpgradeOptions(upgrade=False))
        with ScaleSetClient(box.connection(), rg, name) as client:
            client.manual_upgrade(["2"])
        agents = SandboxAgents(box, vm_names=["myvmss_2"]).start()  # myvmss_3 has no agent: never approves
        try:
            assert agents.wait_ready(10)
            with compute_client(box) as compute:
                first = compute.virtual_machine_scale_sets.begin_delete_instances(rg, name, {"instanceIds": ["3"]})
                assert box.timeline.wait_for(lambda es: any(e.kind == "event_published" for e in es), 5)
                second = compute.virtual_machine_scale_set_vms.begin_delete(rg, name, "2")
                assert box.group.wait_for(lambda: any(a.vm_name == "myvmss_2" for a in box.group.approvals), 30)
                assert box.timeline.wait_for(  # approved, and seen held back by myvmss_3's pending deletion
                    lambda es: any(e.kind == "held_back" and e.vm == "myvmss_2" for e in es), 30)
                pending = box.scheduler.find("myvmss_3")
                assert pending is not None and pending.approved_at is None
                clock.advance(max(0.0, pending.not_before - clock.now()))  # myvmss_3's notice is over
                assert box.scheduler.wait_deleted(["myvmss_2", "myvmss_3"], 30)
                first.result()
                second.result()  # the delete LROs end once the instances are gone
        finally:
            agents.stop()
        blocker, held = box.scheduler.find("myvmss_3"), box.scheduler.find("myvmss_2")
        assert blocker is not None and held is not None
        assert blocker.approved_at is None and blocker.start_reason == "NotBefore passed without approval"
        assert held.not_before - blocker.not_before >= 299  # PT10M vs PT5M
        assert held.approved_by == "myvmss_2" and held.approved_at < blocker.not_before
        assert held.started_at >= blocker.not_before  # it waited for myvmss_3's NotBefore ...
        assert held.started_at < held.not_before  # ... but not for its own
        assert "every other pending deletion" in held.start_reason
        explained = "\n".join(box.report())
        assert "myvmss_2:" in explained and "held back by pending deletion of myvmss_3" in explained
        assert any(e.kind == "held_back" and e.vm == "myvmss_2" for e in box.timeline.entries())
        assert_only_own_events_approved(box)
        # Gone from ARM (VM list through the SDK) and from the network.
        listed = status(box.config.resource_group, box.config.name, connection=box.connection())
        assert sorted(i.name for i in listed.instances) == ["myvmss_0", "myvmss_1"]
        for vm in ("myvmss_2", "myvmss_3"):
            assert box.wait_imds_gone(vm, 5)
            assert vm not in box.imds_urls()


def test_every_instance_sees_every_event_and_deleted_imds_stops_answering() -> None:
    # x5, then a jump to NotBefore once the approval was seen held back: at x100 the PT5M notice lasted
    # 3 real s, and a loaded machine could let it pass before the test saw myvmss_2 still pending
    clock = JumpingClock(speed=5.0)
    with Sandbox(SandboxConfig(instances=3, timeout_minutes=5, speed=5.0, delete_duration=5.0), clock=clock) as box:
        urls = box.imds_urls()
        agent_like = requests.Session()  # a keep-alive connection opened before the deletion
        agent_like.trust_env = False
        events_url = f"{urls['myvmss_2']}/metadata/scheduledevents"
        poll = {"params": {"api-version": "2019-01-01"}, "headers": {"Metadata": "true"}, "timeout": 5}
        assert agent_like.get(events_url, **poll).status_code == 200
        with ScaleSetClient(box.connection(), box.config.resource_group, box.config.name) as c:
            c.patch(b'{"sku": {"capacity": 1}}')
        views = [resources_by_event(imds_events(url)) for url in urls.values()]
        assert all(view == views[0] for view in views)
        assert sorted(r[0] for r in views[0].values()) == ["myvmss_1", "myvmss_2"]
        eid = next(e for e, r in views[0].items() if r == ["myvmss_2"])
        requests.post(f"{urls['myvmss_2']}/metadata/scheduledevents", params={"api-version": "2019-01-01"},
                      headers={"Metadata": "true"}, json={"StartRequests": [{"EventId": eid}]},
                      proxies={"http": None, "https": None}, timeout=5).raise_for_status()
        # Approved, but myvmss_1's simultaneous deletion is not: nothing starts before NotBefore.
        assert box.timeline.wait_for(lambda es: any(e.kind == "held_back" for e in es), 5)
        held = box.scheduler.find("myvmss_2")
        assert held is not None and held.pending
        clock.advance(max(0.0, held.not_before - clock.now()))  # the simultaneous deletions' notice is over
        assert box.scheduler.wait_deleted(["myvmss_1", "myvmss_2"], 20)
        assert box.wait_imds_gone("myvmss_2", 5)
        with pytest.raises(requests.ConnectionError):
            imds_events(urls["myvmss_2"])
        with pytest.raises(requests.ConnectionError):  # issue 12 #6: not even on the old connection
            agent_like.get(events_url, **poll)
        agent_like.close()
        assert imds_events(urls["myvmss_0"])["Events"] == []  # the survivor's view is clean again


def test_stale_instance_gets_the_old_timeout_and_unconfigured_one_none() -> None:
    with running(instances=4, timeout_minutes=5, speed=10.0) as box:
        rg, name = box.config.resource_group, box.config.name
        enable(rg, name, 10, connection=box.connection(), options=UpgradeOptions(upgrade=False))
        with ScaleSetClient(box.connection(), rg, name) as client:
            client.manual_upgrade(["0"])  # only myvmss_0 runs the PT10M model
        with compute_client(box) as compute:
            compute.virtual_machine_scale_sets.begin_delete_instances(rg, name, {"instanceIds": ["0", "1"]})
        assert box.timeline.wait_for(lambda es: sum(e.kind == "event_published" for e in es) == 2, 5)
        document = imds_events(box.imds_urls()["myvmss_3"])
        not_before = {e["Resources"][0]: parsedate_to_datetime(e["NotBefore"]).timestamp()
                      for e in document["Events"]}
        upgraded, stale = box.scheduler.find("myvmss_0"), box.scheduler.find("myvmss_1")
        assert upgraded.timeout_s == 600 and stale.timeout_s == 300  # "incorrect NotBefore"
        assert not_before["myvmss_1"] - stale.requested_at == pytest.approx(300, abs=1.5)
        assert not_before["myvmss_0"] - upgraded.requested_at == pytest.approx(600, abs=1.5)
        assert any(e.kind == "stale_model" and e.vm == "myvmss_1" for e in box.timeline.entries())


def test_never_upgraded_instance_gets_no_event_and_goes_at_once() -> None:
    with running(instances=3, timeout_minutes=None, speed=10.0, delete_duration=5.0) as box:
        rg, name = box.config.resource_group, box.config.name
        enable(rg, name, 5, connection=box.connection(), options=UpgradeOptions(upgrade=False))
        with compute_client(box) as compute:
            compute.virtual_machine_scale_set_vms.begin_delete(rg, name, "2").result()
        deletion = box.scheduler.find("myvmss_2")
        assert deletion.event_id is None and deletion.deleted_at is not None
        assert box.group.approvals == [] and imds_events(box.imds_urls()["myvmss_0"])["Events"] == []


def test_after_disable_and_upgrade_deletions_are_immediate() -> None:
    with running(instances=3, timeout_minutes=5, speed=10.0, delete_duration=5.0) as box:
        rg, name = box.config.resource_group, box.config.name
        agents = SandboxAgents(box).start()
        try:
            assert agents.wait_ready(10)
            result = disable(rg, name, connection=box.connection())
            assert result.changed
            with ScaleSetClient(box.connection(), rg, name) as client:
                client.patch(b'{"sku": {"capacity": 1}}')
            assert box.scheduler.wait_deleted(["myvmss_1", "myvmss_2"], 10)
        finally:
            agents.stop()
        for vm in ("myvmss_1", "myvmss_2"):
            d = box.scheduler.find(vm)
            assert d.event_id is None and d.start_reason.startswith("no terminate notification")
        assert not any(e.kind == "event_published" for e in box.timeline.entries())
        assert box.group.approvals == []
