"""Azure Run Command on scale-set instances, as the ARM emulator plays it.

`POST .../virtualMachineScaleSets/{set}/virtualMachines/{instanceId}/runCommand` (Uniform) and
`POST .../virtualMachines/{name}/runCommand` (a Flexible member) with a `RunCommandInput`
(`{"commandId": "RunShellScript" | "RunPowerShellScript", "script": [lines], "parameters"?}`) is a
long-running operation: 202 with `Azure-AsyncOperation` and `Location`; the status answers
`InProgress` for `polls` polls, then `Succeeded` with `properties.output` (the `RunCommandResult`),
and the Location answers 202 until then and 200 with the `RunCommandResult` itself (the
VirtualMachineScaleSetVMs_RunCommand example in azure-rest-api-specs). Output shapes by OS, as the
examples and the docs show them: Windows -- two statuses, `ComponentStatus/StdOut/succeeded` and
`ComponentStatus/StdErr/succeeded`; Linux -- one `ProvisioningState/succeeded` whose message is
`Enable succeeded: \\n[stdout]\\n...\\n[stderr]\\n...` (`Enable failed: ... exit status=N` when
the script failed).

Nothing runs in a VM: `runner(instance_name, command_id, script)` gives `(stdout, stderr,
exit_code)` (default: empty output, 0), and every command is recorded (`records`) for tests and the
sandbox's timeline. A command id for the other OS is 400, as Azure refuses it.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock

COMMANDS = {"RunShellScript": "Linux", "RunPowerShellScript": "Windows"}
Runner = Callable[[str, str, List[str]], Tuple[str, str, int]]


@dataclass
class RunCommandRecord:
    """One Run Command: where, what, and what it gave."""

    op_id: str
    subscription: str
    scale_set_id: str
    vm_name: str
    os_type: str
    command_id: str
    script: List[str]
    at: float
    polls_left: int
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    ended_at: Optional[float] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.ended_at is not None

    def result(self) -> Dict[str, Any]:
        """The RunCommandResult."""
        if self.os_type == "Windows":
            return {"value": [
                {"code": "ComponentStatus/StdOut/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded",
                 "message": self.stdout},
                {"code": "ComponentStatus/StdErr/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded",
                 "message": self.stderr},
            ]}
        if self.exit_code == 0:
            head = "Enable succeeded: "
        else:
            head = f"Enable failed: failed to execute command: command terminated with exit status={self.exit_code}"
        return {"value": [{"code": "ProvisioningState/succeeded", "level": "Info",
                           "displayStatus": "Provisioning succeeded",
                           "message": f"{head}\n[stdout]\n{self.stdout}\n[stderr]\n{self.stderr}"}]}


class RunCommands:
    """Run commands in flight and done, by operation id."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, polls: int = 1) -> None:
        self.clock = clock
        self.polls = polls
        self.runner: Runner = lambda vm, command, script: ("", "", 0)
        self._lock = threading.Lock()
        self._records: Dict[str, RunCommandRecord] = {}

    @property
    def records(self) -> List[RunCommandRecord]:
        with self._lock:
            return sorted(self._records.values(), key=lambda r: r.at)

    def start(self, subscription: str, scale_set_id: str, vm_name: str, os_type: str, command_id: str,
              script: List[str]) -> RunCommandRecord:
        stdout, stderr, code = self.runner(vm_name, command_id, list(script))
        record = RunCommandRecord(uuid.uuid4().hex, subscription, scale_set_id, vm_name, os_type, command_id,
                                  list(script), self.clock.now(), self.polls, stdout, stderr, code)
        if record.polls_left <= 0:
            record.ended_at = record.at
        with self._lock:
            self._records[record.op_id] = record
        return record

    def find(self, op_id: str) -> Optional[RunCommandRecord]:
        with self._lock:
            return self._records.get(op_id)

    def poll(self, op_id: str) -> Optional[RunCommandRecord]:
        """One status poll: counts down, then the command is done."""
        with self._lock:
            record = self._records.get(op_id)
            if record is not None and not record.done:
                record.polls_left -= 1
                if record.polls_left <= 0:
                    record.ended_at = self.clock.now()
            return record


def check_input(body: Any, os_type: str) -> Optional[Tuple[str, str]]:
    """(code, message) when the RunCommandInput is refused, else None."""
    if not isinstance(body, dict):
        return "InvalidRequestContent", "The request content must be a RunCommandInput object."
    command_id = body.get("commandId")
    if command_id not in COMMANDS:
        return "InvalidParameter", (f"The value '{command_id}' of parameter 'commandId' is not valid; the emulator "
                                    f"serves {', '.join(sorted(COMMANDS))}.")
    if COMMANDS[command_id] != os_type:
        return "InvalidParameter", (f"Command '{command_id}' is not supported for the OS type '{os_type}' of "
                                    "this virtual machine.")
    script = body.get("script", [])
    if not isinstance(script, list) or not all(isinstance(line, str) for line in script):
        return "InvalidParameter", "The parameter 'script' must be a list of strings."
    return None
