"""Every example in docs/agent.md runs, as written: the Python block against a local IMDS, the
shell blocks line by line (a line ending in `&` is started in the background and waited for), and
the synopsis names only options that exist."""

from __future__ import annotations

import os
import re
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import pytest

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer

from .conftest import REPO, wait_until

DOC = (REPO / "docs" / "agent.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent
posix_only = pytest.mark.skipif(os.name == "nt", reason="the shell examples are POSIX shell")


def blocks(language: str) -> List[str]:
    """The fenced blocks of docs/agent.md whose fence names `language` ("" = none)."""
    found, current, kind = [], [], None
    for line in DOC.splitlines():
        if line.startswith("```"):
            if kind is None:
                kind, current = line[3:].strip(), []
            else:
                if kind == language:
                    found.append("\n".join(current) + "\n")
                kind = None
        elif kind is not None:
            current.append(line)
    return found


def _drain_script(directory: Path) -> Path:
    script = directory / "drain.sh"
    script.write_text(f"#!/bin/sh\necho drained >> {shlex.quote(str(directory / 'drained.txt'))}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@posix_only
def test_the_python_example_drains_and_approves_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    (code,) = blocks("python")
    group = PlacementGroup(auto_start=False)
    with EmulatorServer(ImdsEmulator(group, vm_name="myvmss_0", rate_limit=None)) as server:
        eid = group.add_event("Terminate", ["myvmss_0"])
        _drain_script(tmp_path)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("VMSS_TERMINATE_IMDS_URL", server.url)
        exec(compile(code, "docs/agent.md", "exec"), {})
    assert [a.event_id for a in group.approvals if a.accepted] == [eid]
    assert (tmp_path / "drained.txt").read_text() == "drained\n"
    assert "draining myvmss_0" in capsys.readouterr().out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[List[subprocess.Popen]]:
    background: List[subprocess.Popen] = []
    yield background
    for proc in background:
        proc.terminate()
        proc.wait(10)


def _run_block(block: str, tmp_path: Path, background: List[subprocess.Popen]) -> List[subprocess.CompletedProcess]:
    """Runs the block's lines in one environment. The only change: the documented ports (8080,
    8081) become free ones, because tests run in parallel with other users of the machine."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.pop("VMSS_TERMINATE_IMDS_URL", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    ports = {p: str(_free_port()) for p in set(re.findall(r"\b808[01]\b", block))}
    results = []
    for line in block.strip().splitlines():
        for documented, free in ports.items():
            line = re.sub(rf"\b{documented}\b", free, line)
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            env[name] = value
            continue
        if line.rstrip().endswith("&"):
            proc = subprocess.Popen(shlex.split(line.rstrip()[:-1]), cwd=tmp_path, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            background.append(proc)
            port = int(re.search(r"--port (\d+)", line).group(1))  # type: ignore[union-attr]
            assert wait_until(lambda port=port: _listening(port), 15), line  # type: ignore[misc]
            continue
        results.append(subprocess.run(shlex.split(line), cwd=tmp_path, env=env, capture_output=True,
                                      text=True, timeout=60))
        assert results[-1].returncode == 0, (line, results[-1].stderr)
    return results


@posix_only
def test_the_try_it_locally_example_drains_and_approves_as_written(tmp_path: Path, shell: list) -> None:
    block = next(b for b in blocks("") if "agent run --once" in b)
    _drain_script(tmp_path)
    (agent,) = _run_block(block, tmp_path, shell)
    assert "approval_sent" in agent.stderr or "approved" in agent.stderr
    assert (tmp_path / "drained.txt").read_text() == "drained\n"


@posix_only
@pytest.mark.skipif(not any((Path(p) / "curl").exists() for p in os.environ.get("PATH", "").split(os.pathsep)),
                    reason="curl is not installed")
def test_the_fault_example_runs_as_written(tmp_path: Path, shell: list) -> None:
    block = next(b for b in blocks("") if "/emulator/faults" in b)
    posted, listed, cleared = _run_block(block, tmp_path, shell)
    assert "410" in posted.stdout and "410" in listed.stdout and "410" not in cleared.stdout


def test_the_synopsis_names_only_options_that_exist() -> None:
    from click.testing import CliRunner

    from vmss_terminate.cli import main

    synopsis = next(b for b in blocks("") if b.startswith("vmss-terminate agent run"))
    for line in synopsis.split("vmss-terminate agent ")[1:]:
        command = line.split()[0]
        help_text = CliRunner().invoke(main, ["agent", command, "--help"]).output
        for option in set(re.findall(r"--[a-z-]+", line)):
            assert option in help_text, (command, option)
