"""Issue 27 item 8: numbers as floats are written (`1e2`), and SIGHUP stops the agent as SIGTERM does."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from vmss_terminate.agent.command import build, parse_args

from .conftest import VM, Imds, agent_cli, wait_until
from .test_cli import _run_args, _state
from .test_hooks import _alive, probe, runs


def test_a_float_written_with_an_exponent_is_read_by_both_parsers() -> None:
    from vmss_terminate.commands.agent import run_command

    values, _ = parse_args(["--safety-margin", "1e2", "--poll-interval", "2.5E-1"])
    config, _ = build(values)
    assert (config.validated().safety_margin, config.poll_interval) == (100.0, 0.25)
    context = run_command.make_context("run", ["--safety-margin", "1e2"])
    assert context.params["safety_margin"] == 100.0


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_sighup_stops_the_agent_cleanly_with_its_stop_line_and_hook_cleanup(imds: Imds, tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    out, state = tmp_path / "out", tmp_path / "state.json"
    proc = agent_cli(*_run_args(imds, state, probe(out, "block")), "--log-format", "json", "--stop-grace", "0.5")
    try:
        assert wait_until(lambda: len(runs(out)) == 1, 15)
        hook_pid = runs(out)[0]["pid"]
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert wait_until(lambda: not _alive(hook_pid), 5)  # the hook's process tree was stopped
    assert "hooks_finished" not in _state(state)[eid]  # reruns on the next start
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("stopped by SIGHUP" in x.get("message", "") for x in lines), err
    assert imds.server.log.count("POST") == 0
