"""A drain hook for tests: records its environment and stdin, then behaves as told.

usage: hook_probe.py OUTDIR [exit CODE | block]
Writes OUTDIR/<n>.json ({"env": VMSS_TERMINATE_*, "stdin": ..., "pid": ...}) on each run;
`block` waits until OUTDIR/release exists (a hook that drains for a long time).
"""

import json
import os
import sys
import time

out = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "exit"
os.makedirs(out, exist_ok=True)
record = {
    "env": {k: v for k, v in os.environ.items() if k.startswith("VMSS_TERMINATE_")},
    "stdin": sys.stdin.read(),
    "pid": os.getpid(),
    "argv": sys.argv[1:],
}
n = 0
while True:  # claim the next number atomically: hooks of two events may run at the same time
    try:
        os.close(os.open(os.path.join(out, f".{n}.claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        break
    except FileExistsError:
        n += 1
tmp = os.path.join(out, f".{n}.tmp")
with open(tmp, "w") as handle:
    json.dump(record, handle)
os.replace(tmp, os.path.join(out, f"{n}.json"))
if mode == "block":
    while not os.path.exists(os.path.join(out, "release")):
        time.sleep(0.02)
    with open(os.path.join(out, f"{n}.done"), "w") as handle:
        handle.write("done")
    sys.exit(0)
sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
