"""The CLI imports only the command that runs, and a command that needs `[control]` says so.

The lean install is simulated: `tests/no_azure.py` blocks `azure`/`msal`/`cryptography` imports in
a subprocess (a fresh venv per test run would cost a minute on CI; `benchmarks/footprint.py`
installs the real lean venv and checks `vmss-terminate status` there).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

import click
import pytest

from vmss_terminate import cli
from vmss_terminate.commands.lazy import LazyGroup
from vmss_terminate_sim.commands import emulator as emulator_commands

NO_AZURE = str(Path(__file__).resolve().parent / "no_azure.py")
INSTALL = "pip install 'vmss-terminate[control]'"

CONTROL_COMMANDS = [
    ["status", "-g", "rg", "-n", "vmss"],
    ["enable", "-g", "rg", "-n", "vmss", "--timeout", "PT5M"],
    ["disable", "-g", "rg", "-n", "vmss"],
    ["retime", "-g", "rg", "-n", "vmss", "--timeout", "PT10M"],
    ["upgrade", "-g", "rg", "-n", "vmss"],
    ["plan", "-g", "rg", "-n", "vmss", "--timeout", "PT5M"],
    ["demo"],
    ["sandbox"],
    ["emulator", "arm"],
    ["fleet", "audit"],
]


def _lean(*args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, NO_AZURE, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", CONTROL_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_control_command_without_the_extra_is_one_line_exit_2(args: List[str]) -> None:
    proc = _lean(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and INSTALL in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_help_of_a_control_command_works_without_the_extra() -> None:
    proc = _lean("status", "--help")
    assert proc.returncode == 0 and "--resource-group" in proc.stdout


@pytest.mark.parametrize("args", [["--help"], ["agent", "run", "--help"], ["emulator", "imds", "--help"],
                                  ["emulator", "kube", "--help"], ["render", "--format", "kubernetes"],
                                  ["render", "--format", "arm", "--timeout", "PT5M"], ["--version"]])
def test_lean_commands_work_without_the_extra(args: Sequence[str]) -> None:
    proc = _lean(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout


def test_agent_command_imports_nothing_of_control_emulator_or_sandbox() -> None:
    code = ("import sys\n"
            "from vmss_terminate.cli import main\n"
            "try:\n    main(['agent', 'events', '--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('azure', 'msal', 'cryptography') or\n"
            "       m.startswith(('vmss_terminate.control', 'vmss_terminate_sim.emulator', 'vmss_terminate_sim.sandbox',\n"
            "                     'vmss_terminate.iac', 'vmss_terminate.commands.control'))]\n"
            "print('LOADED', bad)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "LOADED []"


@pytest.mark.parametrize("group", [cli.main, emulator_commands.emulator], ids=["root", "emulator"])
def test_registered_summaries_are_the_commands_own_help(group: LazyGroup) -> None:
    ctx = click.Context(group)
    for name, entry in group.lazy.items():
        command = group.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(10_000) == entry.summary, name


def test_root_help_lists_every_command_without_importing_them() -> None:
    code = ("import sys\nfrom vmss_terminate.cli import main, COMMANDS\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('MODULES', sorted({e.module for e in COMMANDS.values()} & set(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "MODULES []"
    for name in cli.COMMANDS:
        assert f"\n  {name} " in proc.stdout
