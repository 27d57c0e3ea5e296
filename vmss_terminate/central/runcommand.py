"""Azure Run Command on the VMs an event lists: the script of `--run-command FILE` inside each
instance, no agent of ours needed (`RunShellScript` on Linux, `RunPowerShellScript` on Windows,
chosen by the scale set's OS type), through the subscription's compute client pipeline.

`POST .../virtualMachineScaleSets/{set}/virtualMachines/{instanceId}/runCommand` (Uniform) or
`.../virtualMachines/{name}/runCommand` (Flexible members) is long-running: the answer's
`Location` (else `Azure-AsyncOperation`) is polled until it gives the `RunCommandResult`, never
past the event's deadline. Output: Windows reports `ComponentStatus/StdOut` and `/StdErr`
statuses (no exit code); Linux one message `[stdout] ... [stderr] ...`, `exit status=N` when the
script failed (azure-rest-api-specs VirtualMachineScaleSetVMRunCommand example; docs/central.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from vmss_terminate.central.graph import ScaleSetInfo
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.arm_errors import arm_errors
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet.session import FleetSession

COMMAND_IDS = {"Windows": "RunPowerShellScript", "Linux": "RunShellScript"}
RUN_COMMAND_API = "2024-11-01"
_EXIT = re.compile(r"exit status=(-?\d+)")
POLL_INTERVAL = 2.0
MAX_WAIT = 90 * 60.0
"""Seconds a Run Command is followed when the event gives no deadline (no NotBefore): Run Command's
documented limit -- "The maximum time a script can run is 90 minutes, after which it will time out"
(Learn, "Run scripts in your Linux/Windows VM by using action Run Commands", Restrictions). Past it
the step fails instead of polling forever."""


@dataclass
class CommandOutput:
    vm_name: str
    ok: bool
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    detail: str = ""


def parse_result(vm_name: str, body: Any) -> CommandOutput:
    """A RunCommandResult -> CommandOutput (either OS's shape)."""
    values = body.get("value") if isinstance(body, dict) else None
    if not isinstance(values, list):
        return CommandOutput(vm_name, False, detail=f"Run Command answered no result list: {str(body)[:200]}")
    stdout, stderr, code = "", "", None
    for item in values:
        if not isinstance(item, dict):
            continue
        kind, message = str(item.get("code") or ""), str(item.get("message") or "")
        if "/StdOut/" in kind:
            stdout = message
        elif "/StdErr/" in kind:
            stderr = message
        elif kind.startswith("ProvisioningState/"):
            out, _, err = message.partition("\n[stderr]\n")
            stdout = out.split("[stdout]\n", 1)[-1]
            stderr = err
            found = _EXIT.search(message.split("\n[stdout]", 1)[0])
            code = int(found.group(1)) if found else (0 if message.startswith("Enable succeeded") else None)
    return CommandOutput(vm_name, code in (0, None), stdout, stderr, code,
                         "exit 0" if code == 0 else f"exit {code}" if code is not None else "no exit code (Windows)")


class RunCommandClient:
    """Runs one script on VMs of scale sets, bounded by a deadline."""

    def __init__(self, session: FleetSession, script: str, clock: Clock = SYSTEM_CLOCK,
                 poll_interval: float = POLL_INTERVAL, max_wait: float = MAX_WAIT) -> None:
        self.session, self.clock, self.poll_interval, self.max_wait = session, clock, poll_interval, max_wait
        self.lines: List[str] = script.splitlines()

    def run(self, info: ScaleSetInfo, vm_name: str, deadline: Callable[[], Optional[float]],
            stopped: Callable[[], bool] = lambda: False) -> CommandOutput:
        command_id = COMMAND_IDS.get(info.os_type or "Linux")
        if command_id is None:
            return CommandOutput(vm_name, False, detail=f"unknown OS type {info.os_type!r}")
        vm_id = info.vm_id(vm_name)
        compute = self.session.compute(info.ref.subscription)
        body = json.dumps({"commandId": command_id, "script": self.lines}).encode()
        with arm_errors(f"Run Command on {vm_name}", vm_id, info.ref.subscription):
            answer = compute.send("POST", f"{vm_id}/runCommand?api-version={RUN_COMMAND_API}", body)
            if answer.status_code == 200:
                return parse_result(vm_name, _json(answer))
            link = answer.headers.get("Location") or answer.headers.get("Azure-AsyncOperation")
            if not link:
                raise AzureError(f"Run Command on {vm_name}: ARM answered {answer.status_code} without a link to "
                                 "follow")
            monitor = "Location" in answer.headers
            give_up = self.clock.monotonic() + self.max_wait  # every wait ends, with or without NotBefore
            while True:
                limit = deadline()
                if self.clock.monotonic() >= give_up:
                    return CommandOutput(vm_name, False, detail=f"no result after {self.max_wait:g} s (Run Command's "
                                                                "documented limit): given up")
                if stopped():
                    return CommandOutput(vm_name, False, detail="handler stopping")
                if limit is not None and self.clock.now() >= limit:
                    return CommandOutput(vm_name, False, detail="deadline (NotBefore minus safety margin) reached")
                status = compute.send("GET", link)
                data = _json(status)
                if monitor and status.status_code == 200:
                    return parse_result(vm_name, data)
                if not monitor and isinstance(data, dict) and data.get("status") not in (None, "InProgress"):
                    if data.get("status") != "Succeeded":
                        return CommandOutput(vm_name, False, detail=f"Run Command {data.get('status')}: "
                                                                    f"{data.get('error')}")
                    return parse_result(vm_name, (data.get("properties") or {}).get("output"))
                wait = min(self.poll_interval, max(0.0, give_up - self.clock.monotonic()))
                if limit is not None:
                    wait = max(0.0, min(wait, limit - self.clock.now()))
                self.clock.sleep(wait)


def _json(answer: Any) -> Any:
    try:
        return json.loads(answer.text() or "null")
    except ValueError:
        return None


def script_lines(text: str) -> List[str]:
    return text.splitlines()


def describe(output: CommandOutput) -> Dict[str, Any]:
    return {"vm": output.vm_name, "ok": output.ok, "exit_code": output.exit_code, "detail": output.detail,
            "stdout": output.stdout[-2000:], "stderr": output.stderr[-2000:]}
