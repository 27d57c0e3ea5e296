"""The replicas' hook: `start EID PID` (PID: the replica's) in the shared log, one O_APPEND write;
for STALL_EVENT it waits until its replica is gone (killed mid-event), then exits."""

from __future__ import annotations

import json
import os
import sys
import threading

event = json.load(sys.stdin)
parent = os.getppid()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, f"start {event['EventId']} {parent}\n".encode())
if event["EventId"] == os.environ.get("STALL_EVENT"):
    gate = threading.Event()
    while os.getppid() == parent:  # until the replica is killed
        gate.wait(0.2)
