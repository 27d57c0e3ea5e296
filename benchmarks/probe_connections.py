"""The probe port under idle connections: an agent (`agent run --listen`) at systemd's default
soft limit of 1,024 file descriptors, N idle TCP connections opened to it (loopback only).

Prints, after the connections are open: the agent's open descriptors and threads, the time
/healthz takes to answer, and whether a drain hook then starts and the Terminate is approved
after it. A thread per connection held 1,021 threads and every descriptor at N = 1,100.

usage: python benchmarks/probe_connections.py [--connections 1100]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from typing import List

import requests

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer

VM = "myvmss_3"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(port: int, path: str) -> bytes:
    """The status line of GET `path` (a fresh connection; no proxies)."""
    session = requests.Session()
    session.trust_env = False
    with session:
        answer = session.get(f"http://127.0.0.1:{port}{path}", timeout=5)
        return f"HTTP/1.1 {answer.status_code} {answer.reason}".encode()


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return int(next(line.split()[1] for line in handle if line.startswith("Threads:")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1100)
    args = parser.parse_args()
    group = PlacementGroup(auto_start=False)
    with EmulatorServer(ImdsEmulator(group, vm_name=VM, rate_limit=None)) as imds, \
            tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        marker = os.path.join(tmp, "drained")
        hook = f"{sys.executable} -c \"open('{marker}', 'w').close()\""
        agent = subprocess.Popen(
            [sys.executable, "-m", "vmss_terminate", "agent", "run", "--imds-url", imds.url, "--state-file",
             os.path.join(tmp, "state.json"), "--listen", f"127.0.0.1:{port}", "--hook", hook,
             "--poll-interval", "0.2"],
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)))
        idle: List[socket.socket] = []
        try:
            for _ in range(300):  # bounded: until the probe port answers
                try:
                    _get(port, "/healthz")
                    break
                except OSError:
                    time.sleep(0.1)
            refused = 0
            for _ in range(args.connections):
                try:
                    idle.append(socket.create_connection(("127.0.0.1", port), timeout=0.2))
                except OSError:
                    refused += 1
            time.sleep(1.0)  # let a thread-per-connection server start its threads
            fds, threads = len(os.listdir(f"/proc/{agent.pid}/fd")), _threads(agent.pid)
            began = time.monotonic()
            try:
                status = _get(port, "/healthz").decode()
            except OSError as exc:
                status = f"no answer ({exc.__class__.__name__})"
            healthz = time.monotonic() - began
            eid = group.add_event("Terminate", [VM])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(a.event_id == eid for a in group.approvals):
                time.sleep(0.05)
            approved = any(a.event_id == eid for a in group.approvals)
            print(f"{args.connections} idle connections at a 1,024-descriptor limit:")
            print(f"  connections that could not connect: {refused}")
            print(f"  agent descriptors {fds}, threads {threads}")
            print(f"  /healthz: {status} in {healthz:.3f} s")
            print(f"  hook ran: {os.path.exists(marker)}; approved: {approved}")
        finally:
            for sock in idle:
                sock.close()
            agent.terminate()
            agent.wait(30)


if __name__ == "__main__":
    main()
