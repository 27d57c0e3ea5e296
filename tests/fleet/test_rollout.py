"""`vmss_terminate.fleet.rollout` and `vmss-terminate fleet rollout`: writes, throttling, resume and
stopping, against the emulator with the real SDK."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, List

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.control import Connection
from vmss_terminate.errors import UsageError
from vmss_terminate.fleet import Scope, audit
from vmss_terminate.fleet.rollout import rollout
from vmss_terminate.fleet.throttle import SubscriptionThrottle
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import PROD, STAGING, arm_writes, run

BOTH = Scope.build(subscriptions=[PROD, STAGING])


def test_rollout_makes_every_set_not_skipped_compliant_with_enables_writes(arm: ArmServers, conn: Connection,
                                                                           state: ArmState) -> None:
    before = audit(BOTH, timeout=10, connection=conn)
    planned: List[Any] = []
    result = rollout(BOTH, timeout=10, connection=conn, batch_size="2", on_plan=planned.append)
    assert result.ok and not result.failed
    assert {o.planned.record.name for o in result.by_status("skipped")} == {"batch-spot",
                                                                            "aks-nodepool1-12345678-vmss"}
    after = audit(BOTH, timeout=10, connection=conn)
    skipped = {"batch-spot", "aks-nodepool1-12345678-vmss"}
    # Flexible sets report no per-member model: after the rollout they are stale-unknown (never green),
    # and the rollout said so in a note
    flexible = {r.name for r in after.scale_sets if not r.uniform}
    assert flexible == {"batch-flex"}
    assert all(r.compliant for r in after.scale_sets if r.name not in skipped | flexible)
    assert all(r.findings == ["stale-unknown"] for r in after.scale_sets if r.name in flexible)
    assert all("stale-unknown" in (o.note or "") for o in result.outcomes if o.planned.record.name in flexible)
    assert not any(r.compliant for r in after.scale_sets if r.name in skipped)  # untouched
    writes = arm_writes(arm)
    assert not any(w.startswith("PUT") for w in writes)
    for record in before.scale_sets:
        mine = [w for w in writes if f"/virtualMachineScaleSets/{record.name}" in w]
        if record.compliant or record.name in skipped:
            assert mine == [], record.name
            continue
        patches = [w for w in mine if w.startswith("PATCH")]
        upgrades = [w for w in mine if w.endswith("/manualupgrade")]
        changes_profile = not record.profile.is_enabled_with(10)
        assert len(patches) == int(changes_profile), record.name
        if record.upgrade_mode == "Manual":
            stale = record.instances if changes_profile else record.stale_instances
            assert len(upgrades) == math.ceil(stale / 2), record.name
    assert planned and planned[0].writes == len(writes)


def test_dry_run_writes_nothing(arm: ArmServers) -> None:
    result = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "enable   rg-web/web-disabled" in result.stdout and "upgrade  rg-web/web-stale" in result.stdout
    assert arm_writes(arm) == []


def test_include_skipped_changes_spot_sets(arm: ArmServers, conn: Connection) -> None:
    scope = Scope.build(subscriptions=[STAGING], name="batch-spot")
    result = rollout(scope, timeout=10, connection=conn, include_skipped=["spot"])
    assert [o.status for o in result.outcomes] == ["changed"]
    with pytest.raises(UsageError):
        rollout(scope, timeout=10, connection=conn, include_skipped=["nope"])


def test_json_summary_and_exit_code(arm: ArmServers) -> None:
    result = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "-o", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ok"] is True and summary["sets"]["changed"] == 3 and summary["sets"]["failed"] == 0
    assert summary["instances_upgraded"] == 4 + 4 + 2


def test_a_failed_set_is_named_and_a_rerun_with_the_journal_finishes(arm: ArmServers, state: ArmState,
                                                                      tmp_path: Path) -> None:
    journal = tmp_path / "rollout.journal"
    state.fail_next_lro("InternalExecutionError", "upgrade went wrong", kind="manualupgrade")
    first = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "--journal", str(journal),
                "--concurrency", "1")
    assert first.exit_code == 1, first.output
    assert "failed rg-web/" in first.stdout and "upgrade went wrong" in first.stdout
    resume = (f"vmss-terminate fleet rollout --subscription {PROD} --arm-endpoint {arm.arm_url} --concurrency 1 "
              f"--timeout 10 --journal {journal}")  # the endpoint from the environment too: runs in any shell
    assert f"resume with: {resume}" in first.stdout
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    assert entries[0]["event"] == "rollout" and entries[0]["timeout"] == "PT10M"
    assert {e["status"] for e in entries if e["event"] == "set"} >= {"started", "failed", "done"}
    second = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "--journal", str(journal), "-o", "json")
    assert second.exit_code == 0, second.output
    summary = json.loads(second.stdout)
    assert summary["resumed"] is True and summary["sets"]["changed"] == 1  # only the failed one is redone
    assert summary["sets"]["compliant_before"] == 3  # the others re-audited, found compliant
    plan = rollout(Scope.build(subscriptions=[PROD]), timeout=10, connection=Connection(arm_endpoint=arm.arm_url),
                   journal=journal, dry_run=True).plan
    assert sum(1 for p in plan.sets if p.done_earlier) == 3


def test_journal_of_another_timeout_is_refused(arm: ArmServers, tmp_path: Path) -> None:
    journal = tmp_path / "j"
    assert run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "--journal", str(journal),
               "--name", "web-compliant").exit_code == 0
    other = run("fleet", "rollout", "--subscription", PROD, "--timeout", "5", "--journal", str(journal))
    assert other.exit_code == 2 and "--timeout PT10M" in other.stderr


def test_stop_starts_no_new_work_and_resume_completes(arm: ArmServers, conn: Connection, tmp_path: Path) -> None:
    stop = threading.Event()
    journal = tmp_path / "j"

    def on_progress(progress: Any) -> None:
        if progress.instances_upgraded >= 1:
            stop.set()  # what Ctrl-C does in the CLI

    first = rollout(BOTH, timeout=10, connection=conn, concurrency=1, batch_size="1", journal=journal,
                    progress=on_progress, stop=stop)
    assert first.interrupted and not first.ok
    statuses = [o.status for o in first.outcomes]
    assert statuses.count("interrupted") == 1 and "not-started" in statuses and "changed" not in statuses
    # the interrupted set sent exactly one upgrade batch: no new batch after the stop
    assert sum(1 for w in arm_writes(arm) if w.endswith("/manualupgrade")) == 1
    second = rollout(BOTH, timeout=10, connection=conn, journal=journal)
    assert second.ok and second.resumed
    assert all(r.compliant or r.findings == ["stale-unknown"] for r in audit(BOTH, timeout=10, connection=conn).scale_sets
               if r.name not in ("batch-spot", "aks-nodepool1-12345678-vmss"))


def test_throttled_writes_are_retried_per_subscription(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    state = ArmState(clock=clock)
    state.load_seed({"generate": {"scaleSets": 12, "subscriptions": 2, "capacity": 4, "special": False},
                     "quotas": {"writes": {"bucket": 3, "refillPerSecond": 1}}})
    arm.reset(state)
    result = rollout(Scope.build(subscriptions=[s.subscription for s in state.scale_sets()]), timeout=10,
                     connection=Connection(arm_endpoint=arm.arm_url), clock=clock, concurrency=6, batch_size="2")
    throttled = [r for r in arm.arm_server.log.all() if r.status == 429]
    assert throttled, "the quota should have been hit"
    assert result.ok and not result.failed
    assert result.throttling["throttled"] == len(throttled) == result.throttling["retried"]
    assert result.throttling["gave_up"] == 0


def test_throttle_gate_blocks_only_its_subscription() -> None:
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock)
    throttle.acquire("a", "writes")
    backoff = throttle.release("a", "writes", 429, {"Retry-After": "7", "x-ms-ratelimit-remaining-subscription-writes": "0"})
    assert backoff == 7.0
    start = clock.now()
    throttle.acquire("b", "writes")  # another subscription: no wait
    assert clock.now() == start
    throttle.release("b", "writes", 200, {})
    throttle.acquire("a", "writes")  # waits out Retry-After on the injected clock
    assert clock.now() - start == pytest.approx(7.0)
    throttle.release("a", "writes", 200, {"x-ms-ratelimit-remaining-subscription-writes": "1"})
    assert throttle.stats.throttled == {"a": 1}


def test_remaining_header_limits_requests_in_flight() -> None:
    clock = ManualClock()
    throttle = SubscriptionThrottle(clock, slice_seconds=0.01)
    throttle.acquire("a", "writes")
    throttle.release("a", "writes", 200, {"x-ms-ratelimit-remaining-subscription-writes": "1"})
    throttle.acquire("a", "writes")  # one token left: one request in flight
    blocked = threading.Event()
    entered = threading.Event()

    def second() -> None:
        blocked.set()
        throttle.acquire("a", "writes")
        entered.set()

    worker = threading.Thread(target=second, daemon=True)
    worker.start()
    assert blocked.wait(5)
    assert not entered.wait(0.1)  # bounded check that it is still held back
    throttle.release("a", "writes", 200, {"x-ms-ratelimit-remaining-subscription-writes": "5"})
    assert entered.wait(5)
    worker.join(5)


def test_terminal_progress_shows_sets_instances_percent_and_eta() -> None:
    import io

    from vmss_terminate.commands.fleet import _RolloutProgress
    from vmss_terminate.commands.progress import ProgressBar
    from vmss_terminate.fleet.rollout import RolloutProgress

    ticks = iter([0.0, 10.0])
    stream = io.StringIO()
    display = _RolloutProgress(ProgressBar(stream, now=lambda: next(ticks)))
    display(RolloutProgress(0, 10, 0, 100, 0, 30, 0.0))
    display(RolloutProgress(3, 10, 40, 100, 12, 30, 10.0))
    display.finish()
    last = stream.getvalue().split("\r")[-1]
    assert "sets 3/10, instances 40/100" in last and "40%" in last and "ETA 0:15" in last


def test_work_is_shared_fairly_across_subscriptions() -> None:
    from vmss_terminate.fleet.rollout import _FairQueue

    queue = _FairQueue([(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "c")])
    first = [queue.pop() for _ in range(3)]
    assert sorted(first) == [0, 3, 4]  # one per subscription before a second from "a"
    queue.done("b")
    assert queue.pop() == 1 and queue.pop() == 2 and not queue


def test_the_resume_line_without_a_journal_runs_as_printed(arm: ArmServers, state: ArmState, tmp_path: Path) -> None:
    """No --journal given: none is added (an old rollout.journal of another timeout in the directory
    would make the hint fail); pasted into a shell in that directory, without the endpoint in the
    environment, it finishes the rollout."""
    import os
    import subprocess
    import sys

    (tmp_path / "rollout.journal").write_text('{"event": "rollout", "timeout": "PT5M"}\n')
    state.fail_next_lro("InternalExecutionError", "upgrade went wrong", kind="manualupgrade")
    first = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "--concurrency", "1")
    assert first.exit_code == 1, first.output
    resume = first.stdout.split("resume with: ", 1)[1].strip()
    assert "--journal" not in resume and f"--arm-endpoint {arm.arm_url}" in resume
    env = {k: v for k, v in os.environ.items() if k != "VMSS_TERMINATE_ARM_ENDPOINT" and "proxy" not in k.lower()}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(["bash", "-c", resume], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    again = run("fleet", "rollout", "--subscription", PROD, "--timeout", "10", "-o", "json")
    assert again.exit_code == 0 and json.loads(again.stdout)["sets"]["changed"] == 0  # the resume finished it
