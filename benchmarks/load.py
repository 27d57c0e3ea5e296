"""Load generator: run a command several times in a row while N busy processes keep the cores busy,
and print how each run ended and how long it took. How the suite's robustness under load is checked
(issue 28: a test that depends on wall-clock speed fails here, not on a colleague's laptop).

    python benchmarks/load.py --busy 6 --runs 10 -- .venv/bin/python -m pytest -q -n 0 \\
        tests/fleet/test_pacing.py tests/fleet/test_wait_timeout.py tests/fleet/test_rollout.py
    python benchmarks/load.py --busy 2 --runs 3 -- .venv/bin/python -m pytest -q
    python benchmarks/load.py --busy 4 --seconds 60          # only keep the cores busy for a minute

Each busy process spins in pure Python until its own deadline (`--max-seconds`, default one hour) or
until this script's process is gone, whichever comes first: nothing outlives the measurement, even
when this script is killed with SIGKILL. Exit status: 0 when every run exited 0, else 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from typing import List, Sequence


def _busy(deadline: float, parent: int) -> None:
    """Spin until `deadline` (time.monotonic) or until the parent process is gone."""
    checked = 0
    while time.monotonic() < deadline:
        x = 0
        for i in range(200_000):  # ~10 ms of CPU between checks
            x += i * i
        checked += 1
        if checked % 20 == 0 and os.getppid() != parent:
            return


def start_busy(count: int, max_seconds: float) -> List[multiprocessing.Process]:
    deadline = time.monotonic() + max_seconds
    processes = [multiprocessing.Process(target=_busy, args=(deadline, os.getpid()), daemon=True)
                 for _ in range(count)]
    for process in processes:
        process.start()
    return processes


def stop_busy(processes: Sequence[multiprocessing.Process]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(5)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=6, help="busy processes (default 6)")
    parser.add_argument("--runs", type=int, default=1, help="times the command is run in a row (default 1)")
    parser.add_argument("--stop-on-failure", action="store_true", help="stop after the first failed run")
    parser.add_argument("--seconds", type=float, default=None, help="no command: keep the cores busy this long")
    parser.add_argument("--max-seconds", type=float, default=3600.0,
                        help="the busy processes stop by themselves after this long (default 3600)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.busy < 0 or args.runs < 1:
        parser.error("--busy must be >= 0 and --runs >= 1")
    if not command and args.seconds is None:
        parser.error("give a command after -- or --seconds")
    limit = min(args.max_seconds, args.seconds) if not command and args.seconds else args.max_seconds
    processes = start_busy(args.busy, limit)
    print(f"load: {args.busy} busy processes on {os.cpu_count()} cores", flush=True)
    failed = done = 0
    started = time.monotonic()
    try:
        if not command:
            time.sleep(limit)
            return 0
        for run in range(1, args.runs + 1):
            began = time.monotonic()
            code = subprocess.call(command)
            took = time.monotonic() - began
            failed += code != 0
            done += 1
            print(f"load: run {run}/{args.runs}: exit {code} in {took:.1f} s", flush=True)
            if code != 0 and args.stop_on_failure:
                break
    finally:
        stop_busy(processes)
    print(f"load: {done - failed} of {done} runs passed, {time.monotonic() - started:.1f} s in all", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
