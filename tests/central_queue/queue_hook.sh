#!/bin/sh
# The replicas' hook (queue_replica.py): `start EID PID` (PID: the replica's) in the shared log, one
# O_APPEND write; for STALL_EVENT it waits until its replica is gone (killed mid-event), then exits.
# A shell script rather than Python: it runs ~200 times per test, ~2 ms of CPU each instead of ~30.
replica=$PPID
printf 'start %s %s\n' "$VMSS_TERMINATE_EVENT_ID" "$replica" >> "$1"
if [ "$VMSS_TERMINATE_EVENT_ID" = "$STALL_EVENT" ]; then
    while kill -0 "$replica" 2>/dev/null; do  # until the replica is killed (and reaped by the test)
        sleep 0.2
    done
fi
