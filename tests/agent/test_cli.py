"""The agent CLI as a user runs it: a subprocess against the emulator, killed and restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, VM, Imds, agent_cli, run_cli, wait_until
from .test_hooks import _alive, probe, runs

posix_only = pytest.mark.skipif(os.name == "nt", reason="kill -9 / SIGTERM semantics are POSIX here")


def _run_args(imds: Imds, state: Path, *hooks: str) -> list:
    args = ["run", "--imds-url", imds.url, "--state-file", str(state), "--poll-interval", "0.1",
            "--first-call-timeout", "5", "--request-timeout", "2"]
    for hook in hooks:
        args += ["--hook", hook]
    return args


def _state(path: Path) -> dict:
    return json.loads(path.read_text())["events"] if path.exists() else {}


@posix_only
def test_kill_9_mid_hook_then_restart_reruns_the_interrupted_hook(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    out, state = tmp_path / "out", tmp_path / "state.json"
    first = agent_cli(*_run_args(imds, state, probe(out, "block")))
    try:
        assert wait_until(lambda: len(runs(out)) == 1 and bool(_state(state).get(eid, {}).get("hook_pid")), 15)
        orphan = runs(out)[0]["pid"]
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    assert _alive(orphan)  # the hook outlived the agent (own process group)
    assert (os.stat(state).st_mode & 0o777) == 0o600
    assert "hooks_finished" not in _state(state)[eid]

    second = agent_cli(*_run_args(imds, state, probe(out, "block")))
    try:
        assert wait_until(lambda: len(runs(out)) == 2, 15), "interrupted hook was not rerun"
        assert wait_until(lambda: not _alive(orphan), 10), "the orphaned hook of the dead agent was not stopped"
        (out / "release").write_text("go")
        assert imds.group.wait_for(lambda: imds.approved_ids() == [eid], 15)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(15)
    assert second.returncode == 0
    assert len(runs(out)) == 2 and imds.approved_ids() == [eid]


@posix_only
def test_kill_9_after_hook_success_resends_approval_without_rerunning(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    out, state = tmp_path / "out", tmp_path / "state.json"
    imds.server.faults.add(status=500, method="POST", times=100000)  # approval never gets through
    first = agent_cli(*_run_args(imds, state, probe(out)))
    try:
        assert wait_until(lambda: _state(state).get(eid, {}).get("hooks_result") == "ok", 15)
        assert imds.server.log.wait_for(lambda r: any(x.method == "POST" for x in r), 10)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    assert "approved" not in _state(state)[eid]
    imds.server.faults.clear()

    second = agent_cli(*_run_args(imds, state, probe(out)))
    try:
        assert imds.group.wait_for(lambda: imds.approved_ids() == [eid], 15), "approval was not re-sent"
        assert wait_until(lambda: "approved" in _state(state).get(eid, {}), 10)
    finally:
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=15)
    assert len(runs(out)) == 1, "a finished hook ran again"
    assert "started for Terminate" not in err  # the second agent started no hook


@posix_only
def test_sigterm_stops_the_hook_still_running_when_the_stop_grace_ends(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    out, state = tmp_path / "out", tmp_path / "state.json"
    proc = agent_cli(*_run_args(imds, state, probe(out, "block")), "--log-format", "json", "--stop-grace", "0.5")
    try:
        assert wait_until(lambda: len(runs(out)) == 1, 15)
        hook_pid = runs(out)[0]["pid"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert wait_until(lambda: not _alive(hook_pid), 5)
    record = _state(state)[eid]
    assert record["hooks_started"] and "hooks_finished" not in record  # reruns on the next start
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(x.get("kind") == "hook_failed" and x["event_id"] == eid for x in lines)
    assert "Traceback" not in err
    assert imds.server.log.count("POST") == 0


def test_once_handles_what_is_visible_and_exits(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    result = run_cli(*_run_args(imds, tmp_path / "s.json", probe(tmp_path / "out")), "--once")
    assert result.returncode == 0, result.stderr
    assert imds.approved_ids() == [eid] and len(runs(tmp_path / "out")) == 1


def test_approve_names_types_besides_terminate_and_none_approves_nothing(imds: Imds, tmp_path: Path) -> None:
    """The issue's own example, `--approve Reboot,Redeploy`, must not stop Terminate approvals."""
    terminate = imds.group.add_event("Terminate", [VM])
    reboot = imds.group.add_event("Reboot", [VM])
    freeze = imds.group.add_event("Freeze", [VM])
    foreign = imds.group.add_event("Reboot", ["myvmss_30"])
    watching = run_cli("run", "--imds-url", imds.url, "--state-file", ":memory:", "--once", "--approve", "none")
    assert watching.returncode == 0, watching.stderr
    assert imds.approved_ids() == []  # observe only
    result = run_cli("run", "--imds-url", imds.url, "--state-file", ":memory:", "--once",
                     "--approve", "Reboot,Redeploy")
    assert result.returncode == 0, result.stderr
    assert sorted(imds.approved_ids()) == sorted([terminate, reboot])  # not the Freeze, never the foreign Reboot
    assert freeze not in imds.approved_ids() and foreign not in imds.approved_ids()


def test_events_command_marks_own_events(imds: Imds) -> None:
    mine = imds.group.add_event("Terminate", [VM])
    other = imds.group.add_event("Terminate", ["myvmss_30"])
    result = run_cli("events", "--imds-url", imds.url, "--output", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["VmName"] == VM
    assert {e["EventId"]: e["Ours"] for e in data["Events"]} == {mine: True, other: False}
    text = run_cli("events", "--imds-url", imds.url)
    assert f"* {mine}" in text.stdout and f"  {other}" in text.stdout


def test_approve_command_refuses_foreign_events_unless_forced(imds: Imds) -> None:
    mine = imds.group.add_event("Terminate", [VM])
    other = imds.group.add_event("Terminate", ["myvmss_30"])
    refused = run_cli("approve", other, "--imds-url", imds.url)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "myvmss_30" in refused.stderr and "--force" in refused.stderr
    assert imds.server.log.count("POST") == 0

    assert run_cli("approve", "no-such-event", "--imds-url", imds.url).returncode == 2
    ok = run_cli("approve", mine, "--imds-url", imds.url)
    assert ok.returncode == 0, ok.stderr
    forced = run_cli("approve", other, "--force", "--imds-url", imds.url)
    assert forced.returncode == 0, forced.stderr
    assert imds.approved_ids() == [mine, other]


@pytest.mark.parametrize("args", [
    ["run", "--approve", "Terminat"],
    ["run", "--api-version", "2017-11-01"],
    ["run", "--poll-interval", "0"],
    ["run", "--poll-interval", "soon"],
    ["run", "--hook", "'unbalanced"],
    ["run", "--on-hook-failure", "retry"],
    ["run", "--imds-url", "ftp://x"],
])
def test_bad_input_is_one_line_and_exit_2_before_any_request(imds: Imds, tmp_path: Path, args: list) -> None:
    full = args + (["--imds-url", imds.url] if "--imds-url" not in args else []) + ["--state-file",
                                                                                     str(tmp_path / "s.json")]
    result = run_cli(*full)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert imds.server.log.count() == 0


def test_imds_unreachable_is_exit_1_with_one_line(tmp_path: Path) -> None:
    result = run_cli("events", "--imds-url", "http://127.0.0.1:9", "--retry-for", "0")
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_agent_never_imports_azure(imds: Imds) -> None:
    code = (
        "import sys\n"
        "import vmss_terminate.agent, vmss_terminate.commands.agent\n"
        "from vmss_terminate.cli import main\n"
        "try:\n"
        f"    main(['agent', 'events', '--imds-url', {imds.url!r}])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "loaded = sorted(m for m in sys.modules if m == 'azure' or m.startswith('azure.'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@posix_only
def test_sigterm_during_a_stalled_imds_request_stops_the_agent_at_once(imds: Imds, tmp_path: Path) -> None:
    imds.server.faults.add(drip=0.5, path_contains="scheduledevents", times=None)
    args = ["run", "--imds-url", imds.url, "--state-file", str(tmp_path / "s.json"), "--vm-name", VM,
            "--first-call-timeout", "120", "--request-timeout", "120"]
    proc = agent_cli(*args)
    try:
        assert imds.server.log.wait_for(lambda r: any("scheduledevents" in x.path for x in r), 15)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)  # the drip alone would hold it for minutes
    finally:
        proc.kill()
        imds.server.faults.clear()
    assert proc.returncode == 0 and "Traceback" not in err


@pytest.mark.parametrize("make_path", [
    lambda tmp: str(tmp),  # a directory
    lambda tmp: "",  # empty is not "the default"
    lambda tmp: str(tmp / "a-file" / "state.json"),  # under a file: cannot be created
])
def test_an_unusable_state_file_is_exit_2_at_start_up(imds: Imds, tmp_path: Path, make_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a-file").write_text("")
    result = run_cli("run", "--once", "--imds-url", imds.url, "--state-file", make_path(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert imds.server.log.count() == 0


def test_retry_for_on_a_long_running_agent_is_refused_not_ignored(imds: Imds, tmp_path: Path) -> None:
    result = run_cli("run", "--retry-for", "3", "--imds-url", imds.url, "--state-file", str(tmp_path / "s.json"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--once" in result.stderr
    assert imds.server.log.count() == 0


@posix_only
def test_sigterm_during_a_drain_lets_the_hook_finish_and_approves_before_exiting(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    out, state = tmp_path / "out", tmp_path / "state.json"
    proc = agent_cli(*_run_args(imds, state, probe(out, "block")), "--stop-grace", "30")
    try:
        assert wait_until(lambda: len(runs(out)) == 1, 15)
        proc.send_signal(signal.SIGTERM)
        assert imds.server.log.count("POST") == 0
        (out / "release").write_text("go")  # the drain finishes within the grace
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert imds.approved_ids() == [eid]
    assert _state(state)[eid]["hooks_result"] == "ok" and "approved" in _state(state)[eid]
    assert "letting the hooks of 1 event(s) finish" in err


@pytest.mark.parametrize("command", [["events"], ["approve", "some-event"]])
@pytest.mark.parametrize("empty", [["--vm-name", ""], ["--imds-url", ""]])
def test_one_shot_commands_refuse_empty_values(imds: Imds, command: list, empty: list) -> None:
    args = [*command, *empty] + (["--imds-url", imds.url] if "--imds-url" not in empty else [])
    result = run_cli(*args)
    assert result.returncode == 2 and result.stderr.startswith("error: empty"), result.stderr
    assert imds.server.log.count() == 0
