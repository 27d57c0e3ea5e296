"""templates/systemd: a hardened unit whose command line the real `agent run` command accepts."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import click
import pytest
from helpers import cli_command

from .conftest import read

UNIT = "systemd/vmss-terminate.service"
DROP_IN = "systemd/hooks.conf.example"
BINARY = "/opt/vmss-terminate/venv/bin/vmss-terminate"


def _directives(text: str) -> Dict[str, List[str]]:
    """`Section.Key` -> values in order (systemd allows repeated keys, so configparser does not fit)."""
    found: Dict[str, List[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return found


def _exec_start(text: str) -> List[str]:
    values = [v for v in _directives(text)["Service.ExecStart"] if v]
    return shlex.split(values[-1])


def test_hardening_and_restart_policy() -> None:
    unit = _directives(read(UNIT))
    expected = {
        "Service.Restart": "always", "Service.StateDirectory": "vmss-terminate",
        "Service.ProtectSystem": "strict", "Service.NoNewPrivileges": "yes", "Service.PrivateTmp": "yes",
        "Service.PrivateDevices": "yes", "Service.ProtectKernelTunables": "yes",
        "Service.ProtectControlGroups": "yes", "Unit.StartLimitIntervalSec": "0",
        "Install.WantedBy": "multi-user.target",
    }
    for key, value in expected.items():
        assert unit.get(key) == [value], key
    assert unit["Service.EnvironmentFile"] == ["-/etc/vmss-terminate/agent.env"]


def test_exec_start_is_the_agent_run_contract() -> None:
    argv = _exec_start(read(UNIT))
    assert argv[:3] == [BINARY, "agent", "run"]
    assert argv[3:5] == ["--state-file", "/var/lib/vmss-terminate/state.json"]
    assert argv[5:] == ["$VMSS_TERMINATE_AGENT_ARGS"]  # systemd splits it into words; no shell


def _agent_run() -> click.Command:
    return cli_command("agent", "run")


@pytest.mark.parametrize("extra", [
    "",
    "--hook /etc/vmss-terminate/hooks/drain",
    "--hook /etc/vmss-terminate/hooks/drain --on-hook-failure wait --poll-interval 1",
])
def test_the_real_agent_cli_accepts_the_unit_command_line(extra: str) -> None:
    """Parse (not run) the unit's arguments, with agent.env's words, through the agent's click command."""
    command = _agent_run()
    argv = [a for a in _exec_start(read(UNIT))[3:] if a != "$VMSS_TERMINATE_AGENT_ARGS"] + extra.split()
    ctx = command.make_context("run", argv, resilient_parsing=False)
    assert ctx.params["state_file"] == "/var/lib/vmss-terminate/state.json"


def test_the_real_agent_cli_accepts_the_drop_in_example() -> None:
    command = _agent_run()
    argv = _exec_start(read(DROP_IN))
    assert argv[0] == BINARY and argv[1:3] == ["agent", "run"]
    ctx = command.make_context("run", argv[3:])
    assert ctx.params["hooks"] == ("/usr/local/bin/drain --grace 30",)
    assert ctx.params["on_hook_failure"] == "wait"


def test_agent_env_example_words_are_accepted() -> None:
    command = _agent_run()
    for key, values in _directives(read("systemd/agent.env.example")).items():
        assert key == ".VMSS_TERMINATE_AGENT_ARGS"
        for value in values:
            command.make_context("run", value.split())


def _verify(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (CI does not install systemd); static checks above still ran")
    stub = tmp_path / "vmss-terminate"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    unit = tmp_path / "vmss-terminate.service"
    # verify checks that ExecStart's binary exists: point it at a stub, change nothing else.
    unit.write_text(text.replace(BINARY, str(stub)))
    return subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    result = _verify(read(UNIT), tmp_path)
    assert result.returncode == 0 and result.stderr.strip() == "" and result.stdout.strip() == "", \
        result.stdout + result.stderr


def test_systemd_analyze_verify_with_the_drop_in(tmp_path: Path) -> None:
    # A repeated [Service] section is how systemd merges a drop-in; verify the merged unit.
    result = _verify(read(UNIT) + "\n" + read(DROP_IN), tmp_path)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr
