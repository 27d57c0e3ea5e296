"""A replica of the queue-reading handler, as a process the tests can kill -9 (python queue_replica.py).

It drives `QueueSource` the way the central handler does: poll, act on each pending event (a "hook":
a line `start EID PID` in the log), acknowledge it (a line `ack EID PID`), settle it; events that are
not pending are settled at once. With STALL_EVENT set, the hook of that event never ends (a replica
killed mid-event). Lines are appended with O_APPEND, one write each, so replicas can share the log.
"""

from __future__ import annotations

import os
import sys
import threading

from vmss_terminate.central.storage_queue import QueueSettings, QueueSource


def main() -> int:
    log_path, queue_name, container = sys.argv[1], sys.argv[2], sys.argv[3]
    stall = os.environ.get("STALL_EVENT", "")
    source = QueueSource.from_connection_string(
        os.environ["QUEUE_CONNECTION_STRING"], queue_name,
        QueueSettings(lease_container=container, lease_duration=15, visibility=15, max_attempts=5))
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    acked = set()
    idle = threading.Event()
    try:
        while True:
            batch = source.poll()
            for event in batch.events:
                if event.pending and event.key not in acked:
                    os.write(fd, f"start {event.event_id} {os.getpid()}\n".encode())
                    if event.event_id == stall:
                        threading.Event().wait()  # a hook that never ends: the test kills us here
                    os.write(fd, f"ack {event.event_id} {os.getpid()}\n".encode())
                    acked.add(event.key)
                source.settle(event)
            if not batch.events:
                idle.wait(0.05)
    finally:
        source.close()


if __name__ == "__main__":
    sys.exit(main())
