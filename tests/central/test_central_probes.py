"""`central run --listen`: the central handler's metrics served by the pipeline's probe listener --
the same paths and answers as before, the same loopback rule and message, and now the agent's
connection limits (one address cannot hold more than `MAX_PER_PEER` connections)."""

from __future__ import annotations

import socket
from typing import List

import pytest
import requests

from vmss_terminate.central.metrics import CentralMetrics, parse_listen, serve
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.probes import MAX_PER_PEER


def test_paths_and_answers() -> None:
    metrics = CentralMetrics(poll_interval=5.0)
    server = serve(metrics, "127.0.0.1", 0)
    try:
        ready = requests.get(server.url + "/readyz", timeout=5)
        assert (ready.status_code, ready.text) == (503, "no complete answer from the source yet\n")
        metrics.observe("poll", complete=True, requests=3, throttled=1)
        metrics.observe("acknowledged", event_type="Terminate", seconds=4.0)
        ready = requests.get(server.url + "/readyz", timeout=5)
        assert (ready.status_code, ready.text) == (200, "ok\n")
        health = requests.get(server.url + "/healthz", timeout=5)
        assert (health.status_code, health.text) == (200, "ok\n")
        text = requests.get(server.url + "/metrics?x=1", timeout=5)
        assert text.status_code == 200 and text.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "vmss_terminate_central_source_requests_total 3\n" in text.text
        assert 'vmss_terminate_central_event_to_acknowledge_seconds_bucket{le="5"} 1\n' in text.text
        assert requests.get(server.url + "/nothing", timeout=5).status_code == 404
        metrics.last_poll = -1e9  # the poll loop stalled
        health = requests.get(server.url + "/healthz", timeout=5)
        assert (health.status_code, health.text) == (503, "poll loop stalled\n")
    finally:
        server.close()


def test_one_address_cannot_hold_more_than_its_share() -> None:
    """A ThreadingHTTPServer kept every connection (a thread each); the pipeline listener closes a
    peer's oldest idle connection when it opens one more than `MAX_PER_PEER`."""
    server = serve(CentralMetrics(), "127.0.0.1", 0)
    port = int(server.server_address[1])
    held: List[socket.socket] = []
    try:
        for _ in range(MAX_PER_PEER + 1):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        assert held[0].recv(100) == b""  # closed by the server to make room
        assert requests.get(server.url + "/healthz", timeout=5).status_code == 200
    finally:
        for sock in held:
            sock.close()
        server.close()


@pytest.mark.parametrize("value, expected", [("127.0.0.1:9100", ("127.0.0.1", 9100)), (":9100", ("127.0.0.1", 9100)),
                                             ("[::1]:9100", ("::1", 9100)), ("localhost:0", ("localhost", 0))])
def test_loopback_addresses_need_no_flag(value: str, expected: tuple) -> None:
    assert parse_listen(value) == expected


def test_another_address_needs_listen_any() -> None:
    with pytest.raises(UsageError) as refused:
        parse_listen("0.0.0.0:9100")
    assert str(refused.value) == ("invalid --listen '0.0.0.0:9100': not a loopback address "
                                  "(pass --listen-any to serve 0.0.0.0)")
    assert parse_listen("0.0.0.0:9100", allow_remote=True) == ("0.0.0.0", 9100)  # --listen-any
