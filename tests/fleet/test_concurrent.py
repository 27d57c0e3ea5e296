"""Rollouts that cannot collide (issue 28 items 1 and 2): a second run on a journal another run holds
refuses at once (exit 2, naming the running one) and writes nothing; the journal lock dies with its
holder; a torn last line left by a crash is ended before the resume appends."""

from __future__ import annotations

import json
from pathlib import Path

from vmss_terminate.fleet.journal import Journal
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import arm_writes, run


def test_a_second_rollout_on_a_held_journal_refuses_at_once_naming_the_first(arm: ArmServers, tmp_path: Path) -> None:
    path = tmp_path / "rollout.journal"
    holder = Journal(path, "PT10M", "20%")  # a rollout in progress (this process holds the lock)
    try:
        result = run("fleet", "rollout", "--timeout", "10m", "--journal", str(path))
        assert result.exit_code == 2, result.output
        message = result.stderr.strip()
        assert message.startswith(f"error: journal {path} is in use by another rollout (pid "), message
        assert "\n" not in message and " since " in message
        assert arm_writes(arm) == []  # refused before any request
        assert len(arm.arm_server.log.all()) == 0
    finally:
        holder.close()
    again = run("fleet", "rollout", "--timeout", "10m", "--journal", str(path))
    assert again.exit_code == 0, again.output  # released with its holder
    runs = [json.loads(line) for line in path.read_text().splitlines() if '"run"' in line]
    assert len(runs) == 2 and all(isinstance(r["pid"], int) and r["host"] for r in runs)


def test_a_dry_run_reads_a_held_journal(arm: ArmServers, tmp_path: Path) -> None:
    path = tmp_path / "rollout.journal"
    with_lock = Journal(path, "PT10M", "20%")
    try:
        result = run("fleet", "rollout", "--timeout", "10m", "--journal", str(path), "--dry-run")
        assert result.exit_code == 0, result.output
    finally:
        with_lock.close()


def test_a_torn_last_line_is_dropped_before_the_resume_appends(tmp_path: Path) -> None:
    path = tmp_path / "rollout.journal"
    header = json.dumps({"event": "rollout", "timeout": "PT10M", "batch_size": "20%"})
    path.write_text(header + "\n" + '{"event": "set", "id": "/subscriptions/x/rg/b", "sta')
    Journal(path, "PT10M", "20%").close()
    Journal(path, "PT10M", "20%").close()  # read again: every line is whole JSON (the torn one was glued to)
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == ["rollout", "run", "run"]


def test_a_full_disk_is_said_in_words(tmp_path: Path) -> None:
    """Issue 28 item 9: '[Errno 28]' on a full disk; /dev/full answers every write with ENOSPC."""
    import pytest

    from vmss_terminate.errors import AzureError

    journal = Journal(tmp_path / "rollout.journal", "PT10M", "20%")
    full = open("/dev/full", "a", encoding="utf-8")
    assert journal._handle is not None
    journal._handle.close()
    journal._handle = full
    with pytest.raises(AzureError) as caught:
        journal.record("/subscriptions/x/rg/a", "started")
    message = str(caught.value)
    assert "No space left on device" in message and "Errno" not in message and "resume with the same" in message
    journal.close()


def test_a_journal_without_a_timeout_is_not_named_none(tmp_path: Path) -> None:
    import pytest

    from vmss_terminate.errors import UsageError

    path = tmp_path / "rollout.journal"
    path.write_text(json.dumps({"event": "rollout", "batch_size": "20%"}) + "\n")
    with pytest.raises(UsageError) as caught:
        Journal(path, "PT10M", "20%")
    assert "None" not in str(caught.value) and "(none recorded)" in str(caught.value)
