"""templates/windows: the install script (checked structurally; parsed by pwsh when present) and the
Custom Script Extension template that runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Dict, Set

import pytest

from .arm_eval import Deployment
from .conftest import TEMPLATES, WINDOWS_AGENT_ARGS, WINDOWS_COMMAND, WINDOWS_PIP_ARGS, load_json, read

SCRIPT = "windows/install-agent.ps1"
CSE = "windows/custom-script-extension.json"


def _script() -> str:
    return read(SCRIPT)


def _param_names(script: str) -> Set[str]:
    block = re.search(r"^param\((.*?)^\)", script, re.MULTILINE | re.DOTALL)
    assert block, "no top-level param( ... ) block"
    return set(re.findall(r"\$([A-Za-z]+)\s*=", block.group(1)))


def _code_only(script: str) -> str:
    """The script without comments, here-strings and string literals, for delimiter checks."""
    text = re.sub(r"<#.*?#>", "", script, flags=re.DOTALL)
    text = re.sub(r"@'\n.*?\n'@", "''", text, flags=re.DOTALL)
    text = re.sub(r"'(?:[^']|'')*'", "''", text)
    text = re.sub(r'"(?:[^"`]|`.)*"', '""', text)
    return re.sub(r"#.*", "", text)


def test_delimiters_balance() -> None:
    code = _code_only(_script())
    pairs = {")": "(", "}": "{", "]": "["}
    stack = []
    for index, char in enumerate(code):
        if char in "({[":
            stack.append((char, index))
        elif char in pairs:
            assert stack and stack[-1][0] == pairs[char], f"unbalanced {char!r} near {code[max(0, index - 60):index]!r}"
            stack.pop()
    assert not stack, f"unclosed {stack[-1][0]!r}"


def test_parameters_and_defaults() -> None:
    names = _param_names(_script())
    assert {"PipArgs", "AgentArgs", "Python", "PythonInstallerUri", "InstallDir", "DataDir", "TaskName"} == names
    assert "[string] $PipArgs = 'vmss-terminate'" in _script()


def test_installs_into_a_venv_and_runs_at_startup_as_system() -> None:
    script = _script()
    for fragment in ("'-m', 'venv'", "'-m', 'pip', 'install'", "New-ScheduledTaskTrigger -AtStartup",
                     "-UserId 'SYSTEM'", "-RestartCount", "Register-ScheduledTask", "Start-ScheduledTask",
                     "agent run --state-file", "Set-StrictMode", "$ErrorActionPreference = 'Stop'"):
        assert fragment in script, fragment


def test_no_string_evaluation() -> None:
    # Arguments reach pip and the agent as argument arrays, never as code.
    assert not re.search(r"Invoke-Expression|\biex\b|-EncodedCommand", _script(), re.IGNORECASE)


def test_state_directory_is_locked_down() -> None:
    assert "'/inheritance:r'" in _script() and "*S-1-5-18:(OI)(CI)F" in _script()


def test_supervisor_restarts_the_agent() -> None:
    runner = re.search(r"@'\n(.*?)\n'@", _script(), re.DOTALL)
    assert runner, "no here-string with run-agent.ps1"
    body = runner.group(1)
    assert "while ($true)" in body and "Start-Sleep" in body
    assert "& $agentExe agent run --state-file" in body


def _function(script: str, name: str) -> str:
    match = re.search(r"^function " + name + r"\b.*?^\}", script, re.MULTILINE | re.DOTALL)
    assert match, f"no function {name}"
    return match.group(0)


def test_python_probe_cannot_abort_the_install() -> None:
    # Windows PowerShell + ErrorActionPreference Stop + redirected stderr of a native command = a fatal
    # NativeCommandError; the Store "python" alias writes to stderr. The probe must contain that.
    script = _script()
    probe = _function(script, "Test-Python")
    assert "$ErrorActionPreference = 'Continue'" in probe and "catch" in probe and "2>$null" in probe
    finder = _function(script, "Find-Python")
    assert "2>$null" not in finder and "Test-Python" in finder
    assert "Select-Object -First 1" in finder  # Get-Command returns every match on PATH


def test_supervisor_logs_stderr_as_plain_lines() -> None:
    body = re.search(r"@'\n(.*?)\n'@", _script(), re.DOTALL).group(1)
    assert "*>>" not in body  # would wrap every stderr line in error-record noise on Windows PowerShell
    assert re.search(r"@extra 2>&1 \|\s+ForEach-Object \{ \"\$_\" \} \| Add-Content", body)


def test_pwsh_parses_the_script() -> None:
    pwsh = shutil.which("pwsh") or shutil.which("powershell")
    if pwsh is None:
        pytest.skip("PowerShell (pwsh) is not installed here; structural checks above still ran")
    path = str(TEMPLATES / SCRIPT).replace("'", "''")
    command = ("$errors = $null; [System.Management.Automation.Language.Parser]::ParseFile("
               f"'{path}', [ref]$null, [ref]$errors) | Out-Null; $errors | ForEach-Object {{ $_.ToString() }}; "
               "exit $errors.Count")
    result = subprocess.run([pwsh, "-NoProfile", "-NonInteractive", "-Command", command],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def _extension(values: Dict[str, str]) -> Dict[str, object]:
    template = load_json(CSE)
    (resource,) = template["resources"]
    return Deployment(template, values).value(resource)


def test_extension_downloads_and_runs_the_script() -> None:
    extension = _extension({"vmssName": "web", "installScriptUri": "https://blob.example/c/install-agent.ps1?sv=x"})
    assert extension["name"] == "web/vmss-terminate-agent"
    properties = extension["properties"]
    assert (properties["publisher"], properties["type"]) == ("Microsoft.Compute", "CustomScriptExtension")
    # The URI may carry a SAS token: protected settings only.
    assert properties["protectedSettings"]["fileUris"] == ["https://blob.example/c/install-agent.ps1?sv=x"]
    assert properties["settings"] == {}
    command = properties["protectedSettings"]["commandToExecute"]
    assert "& .\\install-agent.ps1 " in command
    assert set(re.findall(r" -([A-Z][A-Za-z]+) '", command)) <= _param_names(_script())


def test_extension_command_quotes_like_the_terraform_module() -> None:
    extension = _extension({"vmssName": "web", "installScriptUri": "https://x/install-agent.ps1",
                            "agentPipArgs": WINDOWS_PIP_ARGS, "agentArgs": WINDOWS_AGENT_ARGS})
    assert extension["properties"]["protectedSettings"]["commandToExecute"] == WINDOWS_COMMAND
