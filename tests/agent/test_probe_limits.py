"""The probe port cannot starve the drain (`--listen`): idle and slow connections time out, at most
`MAX_CONNECTIONS` are open at once, a client that goes away early is no traceback, and a hook that
cannot start for lack of descriptors is tried again until its deadline."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

from vmss_terminate.agent.metrics import AgentMetrics
from vmss_terminate.pipeline.probes import MAX_CONNECTIONS, MAX_PER_PEER, ProbeServer

from .conftest import VM, Imds, agent_cli, make_agent, wait_until
from .test_hooks import probe, runs

IDLE_CONNECTIONS = 1100
FD_LIMIT = 1024


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _limit_descriptors() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _raw_get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        return _read_answer(sock)


def _read_answer(sock: socket.socket) -> bytes:
    """One HTTP answer: its head and Content-Length bytes (the server may keep the connection open)."""
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def _open_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="descriptor limits and /proc: Linux")
def test_idle_probe_connections_cannot_starve_the_drain_hook(imds: Imds, tmp_path: Path) -> None:
    """1,100 idle connections at a 1,024-descriptor limit: /healthz still answers, the hook runs and
    the Terminate is approved only after it finished (a thread per connection took every descriptor:
    the hook "cannot start: Too many open files" and the event was approved undrained)."""
    out = tmp_path / "out"
    port = _free_port()
    agent = agent_cli("run", "--imds-url", imds.url, "--state-file", str(tmp_path / "state.json"),
                      "--listen", f"127.0.0.1:{port}", "--hook", probe(out, "block"), "--poll-interval", "0.2",
                      preexec_fn=_limit_descriptors)
    idle: List[socket.socket] = []
    try:
        assert imds.server.log.wait_for(lambda r: sum("scheduledevents" in x.path for x in r) >= 1, 30)
        assert wait_until(lambda: b"200" in _raw_get(port, "/healthz").split(b"\r\n")[0], 10)
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        healthz = _raw_get(port, "/healthz")  # while every idle connection is still open on our side
        assert healthz.startswith(b"HTTP/1.1 200") and healthz.endswith(b"ok\n")
        assert _open_count(agent.pid) < MAX_CONNECTIONS + 40
        eid = imds.group.add_event("Terminate", [VM])
        assert wait_until(lambda: len(runs(out)) == 1, 30), "the hook did not start"
        assert imds.approved_ids() == []  # the hook blocks: nothing is approved undrained
        (out / "release").write_text("go")
        assert wait_until(lambda: imds.approved_ids() == [eid], 30)
        assert (out / "0.done").exists()
    finally:
        for sock in idle:
            sock.close()
        agent.terminate()
        _, err = agent.communicate(timeout=30)
    assert "Traceback" not in err and "Too many open files" not in err, err


def test_idle_and_slow_connections_are_closed_and_capped(imds: Imds) -> None:
    agent = make_agent(imds.url)
    server = ProbeServer(AgentMetrics(agent).attach(), "127.0.0.1", 0, max_connections=4,
                         request_seconds=0.3).start()
    port = int(server.server_address[1])
    try:
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # never finishes its request
        assert slow.recv(100) == b""  # closed by the server after request_seconds
        conns = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(6)]
        assert conns[0].recv(100) == b"" and conns[1].recv(100) == b""  # the two oldest made room
        assert wait_until(lambda: server.open_connections <= 4, 5)
        for sock in [slow, *conns]:
            sock.close()
        assert _raw_get(port, "/healthz").startswith(b"HTTP/1.1 503")  # not running: answered all the same
    finally:
        server.close()


def _connect(port: int, source: str) -> socket.socket:
    """A connection to the probe port on 127.0.0.1 from `source` (any 127.0.0.0/8 address: another peer)."""
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


@contextlib.contextmanager
def _serving(imds: Imds, **limits: Any) -> Iterator[Tuple[ProbeServer, int]]:
    """A probe server of a (not running) agent on 127.0.0.1, with `limits`; yields it and its port."""
    server = ProbeServer(AgentMetrics(make_agent(imds.url)).attach(), "127.0.0.1", 0, **limits).start()
    try:
        yield server, int(server.server_address[1])
    finally:
        server.close()


def test_one_host_opening_connections_in_a_loop_closes_only_its_own(imds: Imds) -> None:
    """The default limits: the kubelet (127.0.0.2) connects, then 127.0.0.1 opens 200 connections
    before the probe's request is read. Before, the 65th connection closed the oldest -- the probe."""
    flood: List[socket.socket] = []
    with _serving(imds) as (server, port):
        kubelet = _connect(port, "127.0.0.2")
        try:
            for _ in range(200):
                flood.append(_connect(port, "127.0.0.1"))
            # the 200th connection closed the oldest the flood still held: all 200 were accepted
            assert _closed_by_server(flood[-MAX_PER_PEER - 1])
            assert wait_until(lambda: server.open_connections == MAX_PER_PEER + 1, 5)
            kubelet.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_answer(kubelet).startswith(b"HTTP/1.1 503")  # answered (the agent does not run)
        finally:
            for sock in [kubelet, *flood]:
                sock.close()


def test_when_every_connection_is_taken_the_busiest_peer_makes_room(imds: Imds) -> None:
    with _serving(imds, max_connections=4, max_per_peer=8, request_seconds=30) as (_, port):
        balancer = _connect(port, "127.0.0.3")  # idle and the oldest, but its address holds just one
        flood = [_connect(port, "127.0.0.1") for _ in range(6)]
        assert _closed_by_server(flood[0]) and _closed_by_server(flood[2])
        balancer.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_answer(balancer).startswith(b"HTTP/1.1 200")
        for sock in [balancer, *flood]:
            sock.close()


def test_a_peer_over_its_share_loses_an_idle_connection_before_one_mid_request(imds: Imds) -> None:
    with _serving(imds, max_per_peer=3, request_seconds=30) as (_, port):
        started = _connect(port, "127.0.0.4")
        started.sendall(b"GET /healthz HTTP/1.1\r\n")  # mid-request (whether or not read yet)
        idle = [_connect(port, "127.0.0.4") for _ in range(3)]  # the 4th makes room: the oldest idle one
        assert _closed_by_server(idle[0])
        started.sendall(b"Host: x\r\n\r\n")
        assert _read_answer(started).startswith(b"HTTP/1.1 503")
        for sock in [started, *idle]:
            sock.close()


def test_a_client_that_goes_away_early_is_no_traceback(imds: Imds, tmp_path: Path) -> None:
    """200 clients that send a request and reset the connection: no BrokenPipe / ConnectionReset
    traceback on stderr, and --log-format json output stays one JSON object a line."""
    port = _free_port()
    agent = agent_cli("run", "--imds-url", imds.url, "--state-file", ":memory:", "--log-format", "json",
                      "--listen", str(port))
    try:
        assert imds.server.log.wait_for(lambda r: sum("scheduledevents" in x.path for x in r) >= 1, 30)
        assert wait_until(lambda: b"200" in _raw_get(port, "/healthz").split(b"\r\n")[0], 10)
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.close()  # linger 0: a reset, not a clean close
        assert _raw_get(port, "/healthz").startswith(b"HTTP/1.1 200")
    finally:
        agent.terminate()
        _, err = agent.communicate(timeout=30)
    assert "Traceback" not in err and "Error" not in err, err
    for line in err.splitlines():
        json.loads(line)


def test_a_hook_that_cannot_start_for_lack_of_descriptors_is_tried_again(tmp_path: Path) -> None:
    """In a child process whose descriptors are all taken: the hook waits (no failure, no approval
    undrained) and starts once descriptors are free again."""
    script = tmp_path / "starve.py"
    script.write_text(f"""
import os, resource, sys, threading
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from vmss_terminate.pipeline.events import Event
from vmss_terminate.pipeline.hooks import CommandHook, Run
from vmss_terminate.clock import SYSTEM_CLOCK
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
hook = CommandHook({sys.executable!r} + " -c pass")
event = Event.from_json({{"EventId": "e1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
                          "Resources": ["vm_1"], "EventStatus": "Scheduled", "NotBefore": ""}})
held = []
while True:
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
import logging
class FreeOnWarning(logging.Handler):  # descriptors come back once the hook said it waits for them
    def emit(self, record):
        while held:
            os.close(held.pop())
logging.basicConfig()
logging.getLogger("vmss_terminate.pipeline.hooks").addHandler(FreeOnWarning())
cancelled, wake = threading.Event(), threading.Event()
result = hook.run(Run(event, "vm_1", SYSTEM_CLOCK, lambda: SYSTEM_CLOCK.now() + 30, cancelled, wake))
print(result.outcome, result.detail)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split()[:3] == ["ok", "exit", "0"], done.stdout + done.stderr
    assert "cannot start (Too many open files); trying again" in done.stderr
