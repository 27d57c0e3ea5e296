"""A replica of `central run --source queue` as a process the tests can kill -9 (python queue_replica.py).

It builds the real central handler (`central.run.build`) over one subscription with the queue as its
source (`open_queue_source`, the connection string from QUEUE_CONNECTION_STRING) and the ARM emulator
the environment names (VMSS_TERMINATE_ARM_ENDPOINT and the managed-identity variables), with one
command hook, and runs it until killed. The hook is queue_hook.sh: a line `start EID PID` per event
in the shared log; for STALL_EVENT it never ends (a replica killed mid-event).
"""

from __future__ import annotations

import os
import sys

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import build
from vmss_terminate.central.storage_queue import QueueSettings, open_queue_source
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope


def main() -> int:
    log_path, queue_url, container, subscription, state = sys.argv[1:6]
    hook = f"sh {os.path.join(os.path.dirname(__file__), 'queue_hook.sh')} {log_path}"
    source = open_queue_source(queue_url, "QUEUE_CONNECTION_STRING",
                               QueueSettings(lease_container=container, lease_duration=15, visibility=15))
    central = build(Scope.build(subscriptions=[subscription]), HandlerConfig(hooks=(hook,), poll_interval=0.05),
                    connection=Connection(arm_endpoint=os.environ["VMSS_TERMINATE_ARM_ENDPOINT"], retry_total=2,
                                          retry_backoff_factor=0.0),
                    state_file=state, source=source)
    try:
        central.handler.run()
    finally:
        central.close()
        source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
