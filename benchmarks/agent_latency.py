"""Agent latency and footprint, measured against the local IMDS emulator (loopback only).

1. Latency: time from an event appearing in the emulator to the agent's approval POST
   (`vmss-terminate agent run --hook true --poll-interval 1`, the agent as a subprocess), over
   N events added at random phases of the poll cycle. Target: max <= poll interval + 0.1 s.
2. Footprint: the agent's steady RSS and CPU % over 60 s of idle polling, measured with psutil,
   next to the RSS of `python -c "import requests"` (the floor). Targets: RSS <= 1.3x floor,
   idle CPU <= 0.5 % of one core.

usage: python benchmarks/agent_latency.py [--events 25] [--idle 60]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

import psutil

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer

VM = "myvmss_3"


def agent_command(url: str, state: str, *extra: str) -> List[str]:
    script = shutil.which("vmss-terminate", path=os.path.dirname(sys.executable))
    base = [script] if script else [sys.executable, "-m", "vmss_terminate"]
    return base + ["agent", "run", "--imds-url", url, "--state-file", state, "--poll-interval", "1", *extra]


def start(cmd: List[str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure_latency(events: int, poll: float = 1.0) -> List[float]:
    group = PlacementGroup(auto_start=True, started_ttl=0.5)
    pause = threading.Event()
    rng = random.Random(7)
    with EmulatorServer(ImdsEmulator(group, vm_name=VM, rate_limit=5.0)) as server, \
            tempfile.TemporaryDirectory() as tmp:
        proc = start(agent_command(server.url, os.path.join(tmp, "state.json"), "--hook", "true"))
        try:
            if not server.log.wait_for(lambda r: any("scheduledevents" in x.path for x in r), 30):
                raise SystemExit("agent did not start polling")
            latencies = []
            for _ in range(events):
                pause.wait(rng.uniform(0, poll))  # a random phase of the agent's poll cycle
                before = len(group.approvals)
                added = time.time()
                eid = group.add_event("Terminate", [VM])
                if not group.wait_for(lambda: len(group.approvals) > before, 10):  # noqa: B023 (called now)
                    raise SystemExit(f"event {eid} was not approved within 10 s")
                latencies.append(group.approvals[before].at - added)
                group.wait_for(lambda: not group.events(), 5)  # Started, then removed
        finally:
            proc.terminate()
            proc.wait(10)
    return latencies


def rss_of(proc: psutil.Process) -> int:
    return int(proc.memory_info().rss)


def measure_idle(seconds: float) -> Dict[str, Any]:
    group = PlacementGroup()
    with EmulatorServer(ImdsEmulator(group, vm_name=VM, rate_limit=5.0)) as server, \
            tempfile.TemporaryDirectory() as tmp:
        floor_proc = subprocess.Popen([sys.executable, "-c", "import requests, sys; print('ready', flush=True); "
                                       "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert floor_proc.stdout is not None and floor_proc.stdin is not None
        floor_proc.stdout.readline()
        floor = rss_of(psutil.Process(floor_proc.pid))
        floor_proc.stdin.close()
        floor_proc.wait(10)

        proc = start(agent_command(server.url, os.path.join(tmp, "state.json")))
        agent = psutil.Process(proc.pid)
        try:
            server.log.wait_for(lambda r: len(r) >= 3, 30)  # warmed up: name + a few polls
            gate = threading.Event()
            gate.wait(2.0)
            cpu0, t0, polls0 = agent.cpu_times(), time.monotonic(), server.log.count("GET")
            samples = []
            while time.monotonic() - t0 < seconds:
                gate.wait(1.0)
                samples.append(rss_of(agent))
            cpu1, t1, polls1 = agent.cpu_times(), time.monotonic(), server.log.count("GET")
        finally:
            proc.terminate()
            proc.wait(10)
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "floor_rss": floor,
        "rss_median": statistics.median(samples),
        "rss_max": max(samples),
        "cpu_percent": 100.0 * cpu / (t1 - t0),
        "polls_per_s": (polls1 - polls0) / (t1 - t0),
        "seconds": t1 - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=25)
    parser.add_argument("--idle", type=float, default=60.0)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]} on {sys.platform}, {os.cpu_count()} CPUs")

    lat = measure_latency(args.events)
    print(f"latency event -> approval POST over {len(lat)} events (hook `true`, poll 1 s): "
          f"min {min(lat):.3f} s, median {statistics.median(lat):.3f} s, max {max(lat):.3f} s "
          f"[target max <= 1.1 s: {'OK' if max(lat) <= 1.1 else 'MISSED'}]")

    idle = measure_idle(args.idle)
    mb = 1024 * 1024
    ratio = idle["rss_median"] / idle["floor_rss"]
    print(f"idle over {idle['seconds']:.0f} s: {idle['polls_per_s']:.2f} GET/s, "
          f"CPU {idle['cpu_percent']:.2f} % of one core "
          f"[target <= 0.5 %: {'OK' if idle['cpu_percent'] <= 0.5 else 'MISSED'}]")
    print(f"RSS agent median {idle['rss_median'] / mb:.1f} MiB (max {idle['rss_max'] / mb:.1f}), "
          f"floor `import requests` {idle['floor_rss'] / mb:.1f} MiB, ratio {ratio:.2f}x "
          f"[target <= 1.3x: {'OK' if ratio <= 1.3 else 'MISSED'}]")


if __name__ == "__main__":
    main()
