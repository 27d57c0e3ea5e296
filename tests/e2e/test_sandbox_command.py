"""`vmss-terminate sandbox`: a long-running process whose printed environment really points the
CLI, the Azure SDK and agents at it; Ctrl-C (SIGINT) stops it cleanly."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any, Dict

import pytest
from e2e_helpers import imds_events
from helpers import interrupt, invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.control import Connection, status

pytestmark = pytest.mark.timeout(60)


def test_text_output_lists_every_endpoint_and_variable() -> None:
    result = invoke_cli(main, ["sandbox", "--instances", "3", "--duration", "0", "--no-feature"])
    assert result.exit_code == 0, result.output
    for name in ("VMSS_TERMINATE_ARM_ENDPOINT", "AZURE_SUBSCRIPTION_ID", "IDENTITY_ENDPOINT", "IDENTITY_HEADER"):
        assert f"export {name}=" in result.output
    imds_lines = [line for line in result.output.splitlines() if line.startswith("VMSS_TERMINATE_IMDS_URL=http://127.0.0.1:")]
    assert [line.rsplit("# ", 1)[1] for line in imds_lines] == ["myvmss_0", "myvmss_1", "myvmss_2"]
    assert len({line.split()[0] for line in imds_lines}) == 3  # a distinct port per instance
    assert "no terminate notification" in result.output and "vmss-terminate enable" in result.output
    assert result.output.rstrip().endswith("sandbox stopped")


def test_bad_input_is_one_line_exit_2() -> None:
    result = invoke_cli(main, ["sandbox", "--instances", "0", "--duration", "0"])
    assert result.exit_code == 2 and "invalid --instances 0" in result.output


def _read_lines(stream: Any, sink: "queue.Queue[str]") -> None:
    for line in stream:
        sink.put(line)


@pytest.mark.skipif(os.name == "nt", reason="SIGINT delivery to a child differs on Windows")
def test_running_sandbox_serves_the_printed_endpoints_until_sigint(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vmss_terminate", "sandbox", "--instances", "2", "--output", "json", "--duration", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        info: Dict[str, Any] = json.loads(lines.get(timeout=20))
        assert sorted(info["imds"]) == ["myvmss_0", "myvmss_1"]
        assert imds_events(info["imds"]["myvmss_1"])["Events"] == []
        for key, value in info["env"].items():  # exactly what a user pastes into a shell
            monkeypatch.setenv(key, value)
        result = status(info["resource_group"], info["name"], connection=Connection(
            subscription_id=os.environ["AZURE_SUBSCRIPTION_ID"],
            arm_endpoint=os.environ["VMSS_TERMINATE_ARM_ENDPOINT"]))
        assert result.profile.enabled and result.profile.timeout == "PT5M"
        assert interrupt(proc, timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.skipif(os.name == "nt", reason="no SIGTERM on Windows")
def test_sigterm_stops_the_sandbox_cleanly_with_its_report() -> None:
    """A service manager stops with SIGTERM: the sandbox must stop its servers and report, not just die."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vmss_terminate", "sandbox", "--instances", "1", "--duration", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    lines: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        lines.get(timeout=20)  # the first banner line: the sandbox is up but may not be waiting yet
        proc.send_signal(signal.SIGTERM)  # a stop during start-up/banner must be handled as well
        assert proc.wait(timeout=20) == 0
        reader.join(timeout=10)  # stdout reaches EOF once the process is gone: every line is queued
        rest = []
        while not lines.empty():
            rest.append(lines.get())
        assert "sandbox stopped\n" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
