"""The drain hook the demo gives each agent: a real `--hook` command, run as a process by the agent.

    python -m vmss_terminate_sim.demo_hook

It does what a real drain hook does with its input -- reads the event from stdin and the
`VMSS_TERMINATE_*` environment -- checks that the event is for this VM, then "drains" for a moment
(`VMSS_TERMINATE_DEMO_DRAIN_SECONDS`, default 0.2 s: simulated work, e.g. finishing requests).
Exit 0 means drained; 3 means the input was inconsistent (the agent then reports a failed hook).
It prints nothing, so the demo's timeline (and `--output json`) stays clean.
"""

from __future__ import annotations

import json
import os
import sys
import time

DRAIN_SECONDS_ENV = "VMSS_TERMINATE_DEMO_DRAIN_SECONDS"


def main() -> int:
    vm_name = os.environ.get("VMSS_TERMINATE_VM_NAME", "")
    try:
        event = json.loads(sys.stdin.read() or "{}")
        resources = json.loads(os.environ.get("VMSS_TERMINATE_RESOURCES", "[]"))
    except ValueError:
        return 3
    event_id = event.get("EventId") if isinstance(event, dict) else None
    if not vm_name or vm_name not in resources or event_id != os.environ.get("VMSS_TERMINATE_EVENT_ID"):
        return 3
    try:
        drain = max(0.0, min(float(os.environ.get(DRAIN_SECONDS_ENV, "0.2")), 60.0))
    except ValueError:
        drain = 0.2
    time.sleep(drain)  # the simulated drain itself, not synchronisation
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
